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

def Glm_ReadsStepContext : OpInterface<"ReadsStepContext"> {
  let cppNamespace = "::glm::ir";
  let description = [{
    An op whose plan step reads the program's step context, the io slots the
    host writes before each run: which of `positions`, `sequence_slots`,
    `page_table` and `sampling_params`, in the order its kernels take them after
    the op's own operands. An op that names a state reads at least the
    positions and sequence slots. An op that picks rows (`last_rows`) also
    writes the picked rows' positions after its results, and the steps after it
    that run on the picked rows read those as their positions (the ones that
    run on every row, the MTP head's, keep the program's).
  }];
  let methods = [
    StaticInterfaceMethod<"the step-context io slots read, in operand order",
                          "::llvm::ArrayRef<::llvm::StringRef>", "getStepContext">,
    StaticInterfaceMethod<"whether the step picks rows and writes their positions", "bool",
                          "picksRows">,
  ];
}

/// The declaration an op that reads the step context adds: the io slots `slots`, in order, and
/// whether it picks rows.
class Glm_StepContextOf<list<string> slots, bit picks = 0> {
  code decl = "\nstatic ::llvm::ArrayRef<::llvm::StringRef> getStepContext() {\n"
              "  static const ::llvm::StringRef slots[] = {"
              # !interleave(!foreach(n, slots, "\"" # n # "\""), ", ") # "};\n"
              "  return slots;\n}\n"
              "static bool picksRows() { return " # !if(picks, "true", "false") # "; }";
}

#endif // GLM_IR_GLMINTERFACES_TD
