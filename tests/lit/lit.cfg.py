# lit configuration: glmc and glm-opt from the build tree, FileCheck from LLVM 22.
import os

import lit.formats

config.name = "glmc"
config.test_format = lit.formats.ShTest(execute_external=True)
# IR tests need glm-opt, which only a build with the compiler has.
config.suffixes = [".test", ".mlir"] if config.glm_build_compiler else [".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.glm_obj_root, "tests", "lit")
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in"]

bin_dir = os.path.join(config.glm_obj_root, "bin")
config.environment["PATH"] = os.pathsep.join(
    [bin_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])]
)
config.substitutions.append(("%glmc", os.path.join(bin_dir, "glmc")))
config.substitutions.append(("%fixtures", config.glm_fixtures_dir))
