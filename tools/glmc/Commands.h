// The glmc subcommands; each takes its arguments after the subcommand name and returns an exit
// code.
#pragma once

#include <string>
#include <vector>

namespace glm::tools {

int runInfo(const std::vector<std::string> &args);
int runSynth(const std::vector<std::string> &args);
int runInspect(const std::vector<std::string> &args);
int runBench(const std::vector<std::string> &args);
int runGenerate(const std::vector<std::string> &args);
int runServe(const std::vector<std::string> &args);
int runWorker(const std::vector<std::string> &args);
int runUp(const std::vector<std::string> &args);
int runRenderChat(const std::vector<std::string> &args);
int runTokenize(const std::vector<std::string> &args);
int runQuantize(const std::vector<std::string> &args);
int runDequantize(const std::vector<std::string> &args);
#ifdef GLM_HAVE_COMPILER
int runDumpIr(const std::vector<std::string> &args);
int runCompile(const std::vector<std::string> &args);
#endif

} // namespace glm::tools
