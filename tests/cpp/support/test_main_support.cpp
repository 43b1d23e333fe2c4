// Anchors the test-support library so it always has one object file.
namespace sparse_mla::test_support {
int anchor() { return 0; }
}  // namespace sparse_mla::test_support
