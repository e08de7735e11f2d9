// Gathering a machine's facts for `glmc up`'s checks, and sending them as JSON.
#include "tools/glmc/UpFacts.h"

#include "base/Hmac.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/schema/PlanVersion.h"
#include "tools/glmc/PlanMemory.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace glm::tools {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string hexOf(const Sha256Digest &digest) {
  std::string text;
  char byte[3];
  for (uint8_t b : digest) {
    std::snprintf(byte, sizeof byte, "%02x", b);
    text += byte;
  }
  return text;
}

std::string firstLine(const std::string &path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::vector<GpuFacts> gpus(std::string &error) {
  std::vector<GpuFacts> out;
  Expected<const cuda::CudaDriver *> driver = cuda::driver();
  if (!driver.ok()) {
    error = driver.status().message();
    return out;
  }
  const cuda::CudaDriver *d = *driver;
  int count = 0;
  if (Status s = cuda::check(d->cuDeviceGetCount(&count), "cuDeviceGetCount"); !s.ok()) {
    error = s.message();
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cuda::CUdevice device = 0;
    if (!cuda::check(d->cuDeviceGet(&device, i), "cuDeviceGet").ok()) {
      continue;
    }
    GpuFacts g;
    char name[256] = {};
    d->cuDeviceGetName(name, sizeof name - 1, device);
    g.name = name;
    int major = 0, minor = 0;
    d->cuDeviceGetAttribute(&major, cuda::kAttrComputeCapabilityMajor, device);
    d->cuDeviceGetAttribute(&minor, cuda::kAttrComputeCapabilityMinor, device);
    g.arch = (major == 9 && minor == 0)    ? "sm_90a"
             : (major == 12 && minor == 1) ? "sm_121a"
                                           : strCat("sm_", major, minor);
    size_t bytes = 0;
    d->cuDeviceTotalMem(&bytes, device);
    g.memoryBytes = bytes;
    out.push_back(std::move(g));
  }
  if (out.empty()) {
    error = "the CUDA driver sees no device";
  }
  return out;
}

std::vector<InterfaceFacts> interfaces() {
  std::vector<InterfaceFacts> out;
  ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0) {
    return out;
  }
  for (ifaddrs *a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr ||
        (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6)) {
      continue;
    }
    char text[INET6_ADDRSTRLEN] = {};
    const void *raw = a->ifa_addr->sa_family == AF_INET
                          ? static_cast<const void *>(
                                &reinterpret_cast<const sockaddr_in *>(a->ifa_addr)->sin_addr)
                          : static_cast<const void *>(
                                &reinterpret_cast<const sockaddr_in6 *>(a->ifa_addr)->sin6_addr);
    inet_ntop(a->ifa_addr->sa_family, raw, text, sizeof text);
    out.push_back({a->ifa_name, text, (a->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  return out;
}

/// The bytes a sampled hash covers: a safetensors file's header, or a small file whole, then 16
/// blocks of 64 KiB spread evenly (the first at 0, the last ending at the end).
Status hashFile(const fs::path &path, uint64_t size, bool full, std::string &hash) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return ioError(path.string(), ": cannot be read");
  }
  Sha256 sha;
  const uint64_t sizeLe = size;
  sha.add(&sizeLe, sizeof sizeLe);
  std::vector<char> buffer(1 << 20);
  auto hashRange = [&](uint64_t offset, uint64_t bytes) -> Status {
    in.clear();
    in.seekg(static_cast<std::streamoff>(offset));
    while (bytes > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes, buffer.size()));
      in.read(buffer.data(), static_cast<std::streamsize>(n));
      if (static_cast<size_t>(in.gcount()) != n) {
        return ioError(path.string(), ": short read at byte ", offset);
      }
      sha.add(buffer.data(), n);
      bytes -= n;
      offset += n;
    }
    return Status::success();
  };
  constexpr uint64_t kSmall = uint64_t(64) << 20, kBlock = 64 << 10, kBlocks = 16;
  if (full || size <= kSmall) {
    GLM_RETURN_IF_ERROR(hashRange(0, size));
  } else {
    uint64_t header = 0;
    if (path.extension() == ".safetensors" && size >= 8) {
      uint64_t length = 0;
      in.read(reinterpret_cast<char *>(&length), 8);
      header = 8 + std::min<uint64_t>(length, size - 8);
    }
    GLM_RETURN_IF_ERROR(hashRange(0, std::min<uint64_t>(header, kSmall)));
    for (uint64_t i = 0; i < kBlocks; ++i) {
      const uint64_t offset = (size - kBlock) * i / (kBlocks - 1);
      GLM_RETURN_IF_ERROR(hashRange(offset, kBlock));
    }
  }
  hash = hexOf(sha.finish());
  return Status::success();
}

/// Full hashes take minutes for a 176 GB checkpoint: kept by path, size and mtime.
struct HashCache {
  fs::path file;
  Json entries = Json::object();

  explicit HashCache(const std::string &dir) {
    if (dir.empty()) {
      return;
    }
    file = fs::path(dir) / "checkpoint-hashes.json";
    std::ifstream in(file);
    if (in) {
      entries = Json::parse(in, nullptr, false);
      if (!entries.is_object()) {
        entries = Json::object();
      }
    }
  }
  static std::string key(const fs::path &path, uint64_t size, int64_t mtime) {
    return strCat(fs::absolute(path).string(), "|", size, "|", mtime);
  }
  void save() {
    if (file.empty()) {
      return;
    }
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    const fs::path tmp = file.string() + ".tmp";
    std::ofstream(tmp) << entries.dump(1);
    fs::rename(tmp, file, ec);
  }
};

} // namespace

CheckpointFacts checkpointFacts(const std::string &dir, const std::string &hashMode,
                                const std::string &cacheDir) {
  CheckpointFacts facts;
  facts.dir = dir;
  facts.hashMode = hashMode;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    facts.error = fs::exists(dir, ec) ? "is not a directory" : "does not exist";
    return facts;
  }
  const bool full = hashMode == "full";
  HashCache cache(full ? cacheDir : "");
  bool cacheChanged = false;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file(ec) || name.empty() || name[0] == '.' ||
        (ext != ".safetensors" && ext != ".json" && ext != ".jinja")) {
      continue;
    }
    CheckpointFileFacts f;
    f.name = name;
    f.size = e.file_size(ec);
    const int64_t mtime = static_cast<int64_t>(e.last_write_time(ec).time_since_epoch().count());
    const std::string key = HashCache::key(e.path(), f.size, mtime);
    if (full && cache.entries.contains(key)) {
      f.hash = cache.entries[key].get<std::string>();
    } else if (Status s = hashFile(e.path(), f.size, full, f.hash); !s.ok()) {
      facts.error = s.message();
      return facts;
    } else if (full) {
      cache.entries[key] = f.hash;
      cacheChanged = true;
    }
    facts.files.push_back(std::move(f));
  }
  if (ec) {
    facts.error = strCat("cannot be listed: ", ec.message());
  }
  std::sort(facts.files.begin(), facts.files.end(),
            [](const auto &a, const auto &b) { return a.name < b.name; });
  if (cacheChanged) {
    cache.save();
  }
  return facts;
}

bool portIsFree(int port) {
  // Bound on the wildcard address, as a listener on any address of the port would refuse it.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    return false;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  const bool free = bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0;
  close(fd);
  return free;
}

Expected<std::vector<std::string>> resolveHost(const std::string &host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *result = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result); rc != 0) {
    return notFound("cannot resolve ", host, ": ", gai_strerror(rc));
  }
  std::vector<std::string> out;
  for (addrinfo *a = result; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void *raw =
        a->ai_family == AF_INET
            ? static_cast<const void *>(&reinterpret_cast<sockaddr_in *>(a->ai_addr)->sin_addr)
            : static_cast<const void *>(&reinterpret_cast<sockaddr_in6 *>(a->ai_addr)->sin6_addr);
    inet_ntop(a->ai_family, raw, text, sizeof text);
    if (std::find(out.begin(), out.end(), text) == out.end()) {
      out.push_back(text);
    }
  }
  freeaddrinfo(result);
  return out;
}

Expected<std::string> sourceAddressToward(const std::string &host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo *result = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "9", &hints, &result); rc != 0) {
    return notFound("cannot resolve the worker ", host, " to an IPv4 address: ", gai_strerror(rc));
  }
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  const bool connected = fd >= 0 && connect(fd, result->ai_addr, result->ai_addrlen) == 0;
  freeaddrinfo(result);
  sockaddr_in local{};
  socklen_t length = sizeof local;
  const bool named =
      connected && getsockname(fd, reinterpret_cast<sockaddr *>(&local), &length) == 0;
  if (fd >= 0) {
    close(fd);
  }
  if (!named) {
    return Status(StatusCode::Unavailable, strCat("no route from this machine to ", host));
  }
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return std::string(text);
}

MachineFacts probeThisMachine(const ProbeRequest &request) {
  MachineFacts f;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  f.hostname = host;
  f.bootId = firstLine("/proc/sys/kernel/random/boot_id");
  if (Expected<uint64_t> mem = hostMemAvailable(); mem.ok()) {
    f.memAvailable = *mem;
  } else {
    f.memError = mem.status().message();
  }
  f.gpus = gpus(f.gpuError);
  if (!request.modelDir.empty()) {
    f.checkpoint = checkpointFacts(request.modelDir, request.hashMode, request.cacheDir);
  }
  f.interfaces = interfaces();
  for (int port : request.ports) {
    if (!portIsFree(port)) {
      f.portsInUse.push_back(port);
    }
  }
  f.planFormat = plan::kPlanFormatVersion;
  if (!request.runDir.empty()) {
    std::error_code ec;
    fs::create_directories(request.runDir, ec);
    if (ec) {
      f.runDirError = strCat("cannot create ", request.runDir, ": ", ec.message());
    } else {
      f.runDir = fs::absolute(request.runDir).lexically_normal().string();
    }
  }
  return f;
}

Json toJson(const MachineFacts &f) {
  Json gpusJson = Json::array();
  for (const GpuFacts &g : f.gpus) {
    gpusJson.push_back({{"name", g.name}, {"arch", g.arch}, {"memory_bytes", g.memoryBytes}});
  }
  Json files = Json::array();
  for (const CheckpointFileFacts &c : f.checkpoint.files) {
    files.push_back({{"name", c.name}, {"size", c.size}, {"hash", c.hash}});
  }
  Json ifaces = Json::array();
  for (const InterfaceFacts &i : f.interfaces) {
    ifaces.push_back({{"name", i.name}, {"address", i.address}, {"loopback", i.loopback}});
  }
  return {{"hostname", f.hostname},
          {"boot_id", f.bootId},
          {"mem_available", f.memAvailable},
          {"mem_error", f.memError},
          {"gpus", gpusJson},
          {"gpu_error", f.gpuError},
          {"checkpoint",
           {{"dir", f.checkpoint.dir},
            {"error", f.checkpoint.error},
            {"hash_mode", f.checkpoint.hashMode},
            {"files", files}}},
          {"interfaces", ifaces},
          {"ports_in_use", f.portsInUse},
          {"plan_format", f.planFormat},
          {"run_dir", f.runDir},
          {"run_dir_error", f.runDirError}};
}

Expected<MachineFacts> machineFactsFromJson(const std::string &text) {
  // The probe's output is the last line that parses: a login banner or motd may come before it.
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    const size_t start = text.rfind("\n{");
    if (start != std::string::npos) {
      j = Json::parse(text.substr(start + 1), nullptr, false);
    }
  }
  if (j.is_discarded() || !j.is_object()) {
    return formatError("the worker's `glmc up probe` printed no JSON facts");
  }
  try {
    MachineFacts f;
    f.hostname = j.at("hostname").get<std::string>();
    f.bootId = j.at("boot_id").get<std::string>();
    f.memAvailable = j.at("mem_available").get<uint64_t>();
    f.memError = j.at("mem_error").get<std::string>();
    for (const Json &g : j.at("gpus")) {
      f.gpus.push_back({g.at("name").get<std::string>(), g.at("arch").get<std::string>(),
                        g.at("memory_bytes").get<uint64_t>()});
    }
    f.gpuError = j.at("gpu_error").get<std::string>();
    const Json &c = j.at("checkpoint");
    f.checkpoint.dir = c.at("dir").get<std::string>();
    f.checkpoint.error = c.at("error").get<std::string>();
    f.checkpoint.hashMode = c.at("hash_mode").get<std::string>();
    for (const Json &file : c.at("files")) {
      f.checkpoint.files.push_back({file.at("name").get<std::string>(),
                                    file.at("size").get<uint64_t>(),
                                    file.at("hash").get<std::string>()});
    }
    for (const Json &i : j.at("interfaces")) {
      f.interfaces.push_back({i.at("name").get<std::string>(), i.at("address").get<std::string>(),
                              i.at("loopback").get<bool>()});
    }
    f.portsInUse = j.at("ports_in_use").get<std::vector<int>>();
    f.planFormat = j.at("plan_format").get<uint32_t>();
    f.runDir = j.at("run_dir").get<std::string>();
    f.runDirError = j.at("run_dir_error").get<std::string>();
    return f;
  } catch (const Json::exception &e) {
    return formatError("the worker's `glmc up probe` facts are incomplete (", e.what(),
                       "): is the worker's glmc the same build as this one?");
  }
}

} // namespace glm::tools
