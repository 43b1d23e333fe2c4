// The Autograd kernel shared by every operator (registration.cpp): the operations have no
// backward, so a differentiable call must fail loudly rather than return outputs that silently
// carry no gradient.
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <string>

#include "ops.h"

namespace sparse_mla::python {

void no_backward(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                 torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  // plan_decode reads shapes only and returns no tensor: nothing to differentiate.
  if (at::GradMode::is_enabled() && schema.name() != "sparse_mla::plan_decode") {
    const size_t n = schema.arguments().size();
    for (size_t i = 0; i < n; ++i) {
      const c10::IValue& value = (*stack)[stack->size() - n + i];
      if (value.isTensor() && value.toTensor().defined() && value.toTensor().requires_grad()) {
        // The user-facing name: sparse_decode_alloc is sparse_decode with allocated outputs.
        std::string op_name = schema.name().substr(schema.name().find("::") + 2);
        const std::string suffix = "_alloc";
        if (op_name.size() > suffix.size() &&
            op_name.compare(op_name.size() - suffix.size(), suffix.size(), suffix) == 0) {
          op_name.resize(op_name.size() - suffix.size());
        }
        const std::string arg = schema.arguments()[i].name();
        C10_THROW_ERROR(NotImplementedError,
                        op_name + ": backward is not implemented (" + arg +
                            " requires grad); call it under torch.no_grad() or pass " + arg +
                            ".detach()");
      }
    }
  }
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

}  // namespace sparse_mla::python
