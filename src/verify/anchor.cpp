// Keeps the verify library non-empty while its parts are built up.
namespace sparse_mla::verify {
int library_anchor() { return 0; }
}  // namespace sparse_mla::verify
