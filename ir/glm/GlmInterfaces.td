//===- GlmInterfaces.td - interfaces of glm ops ------------*- tablegen -*-===//
//
// What the lowering to plan steps asks of an op generically.
//
//===----------------------------------------------------------------------===//

#ifndef GLM_IR_GLMINTERFACES_TD
#define GLM_IR_GLMINTERFACES_TD

include "mlir/IR/OpBase.td"

def Glm_SymbolContract : OpInterface<"SymbolContract"> {
  let cppNamespace = "::glm::ir";
  let description = [{
    An op that names weights and states: the attributes that hold them, in the
    order its kernels take them (the plan step's weights and states, in the
    contract its kernels/<op>/<op>_op.cpp documents). An absent optional one is
    skipped.
  }];
  let methods = [
    StaticInterfaceMethod<"the weight and state attributes in contract order",
                          "::llvm::ArrayRef<::llvm::StringRef>", "getContractSymbols">,
  ];
}

/// The declaration an op with a symbol contract adds: `names`, in order.
class Glm_ContractOf<list<string> names> {
  code decl = "static ::llvm::ArrayRef<::llvm::StringRef> getContractSymbols() {\n"
              "  static const ::llvm::StringRef names[] = {"
              # !interleave(!foreach(n, names, "\"" # n # "\""), ", ") # "};\n"
              "  return names;\n}";
}

#endif // GLM_IR_GLMINTERFACES_TD
