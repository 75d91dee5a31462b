#include "tools/launcher/options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace rcoll::launcher {
namespace {

Status bad(std::string message) { return Status(ErrorCode::kInvalidArgument, std::move(message)); }

bool parse_int(std::string_view text, long& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

bool parse_seconds(const std::string& text, double& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(text.c_str(), &end);
  return errno == 0 && *end == '\0' && std::isfinite(out) && out >= 0;
}

}  // namespace

const char* usage_text() {
  return "Usage: rcoll-run -n N [options] -- PROGRAM [ARGS...]\n"
         "Starts the rcoll rendezvous store and N local ranks of PROGRAM, prefixes their\n"
         "output with the rank and exits with the first failing rank's code.\n"
         "\n"
         "Options:\n"
         "  -n, --nproc N            number of ranks, 1..1024 (required)\n"
         "  --transport T            auto|nccl|ucx|tcp: sets RCOLL_TRANSPORT for every rank\n"
         "  --inject SPEC            fault injection spec: sets RCOLL_INJECT for every rank\n"
         "  --timeout SECONDS        wall-clock limit for the job; on expiry the ranks are\n"
         "                           stopped and rcoll-run exits 124\n"
         "  --linger SECONDS         after the first failure, let the other ranks run this long (to\n"
         "                           report their side) before stopping them (default 0)\n"
         "  --grace SECONDS          how long stopped ranks get between SIGTERM and SIGKILL\n"
         "                           (default 5)\n"
         "  --tag-output             prefix every output line with \"[RANK] \" (default)\n"
         "  --no-tag-output          pass the ranks' output through untouched\n"
         "  --store-port P           port of the embedded store (default 0: any free port)\n"
         "  --store-host ADDR        address the embedded store binds to and the ranks dial\n"
         "                           (default 127.0.0.1; e.g. a bridge address when ranks run\n"
         "                           in their own network namespaces)\n"
         "  --bind-to core|none|auto core: each rank runs on its own share of the logical CPUs\n"
         "                           this launcher may use (consecutive ones, all of them used;\n"
         "                           one each, wrapping, with more ranks than CPUs; the threads a\n"
         "                           rank starts share them); none: the scheduler places the\n"
         "                           ranks; auto (default): core for up to 2 ranks, as mpirun\n"
         "                           binds, else none\n"
         "  -h, --help               show this help\n"
         "  --version                show the rcoll version\n"
         "\n"
         "Every rank gets RCOLL_RANK, RCOLL_WORLD_SIZE, RCOLL_LOCAL_RANK,\n"
         "RCOLL_LOCAL_WORLD_SIZE, RCOLL_STORE_ADDR, RCOLL_JOB_TOKEN and RCOLL_JOB_ID.\n"
         "SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to every rank.\n"
         "Exit code: 0 if every rank exits 0; else the first failing rank's code (128+N if\n"
         "killed by signal N); 124 on --timeout; 2 on bad usage; 125 if rcoll-run fails.\n";
}

Result<LaunchOptions> parse_launch_options(const std::vector<std::string>& args) {
  static const std::vector<std::string_view> kTakesValue = {
      "-n", "--nproc", "--transport", "--inject", "--timeout", "--linger", "--grace", "--store-port",
      "--store-host", "--bind-to"};
  LaunchOptions opts;
  bool have_n = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program starts here

    // Split "--opt=value" and "-nVALUE"; otherwise the value is the next argument.
    std::string name = arg;
    std::optional<std::string> value;
    if (arg.rfind("--", 0) == 0) {
      if (size_t eq = arg.find('='); eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
      }
    } else if (arg.size() > 2) {
      name = arg.substr(0, 2);
      value = arg.substr(2);
    }
    const bool takes_value =
        std::find(kTakesValue.begin(), kTakesValue.end(), name) != kTakesValue.end();
    if (takes_value && !value) {
      if (i + 1 >= args.size()) return bad("option " + name + " needs a value");
      value = args[++i];
    }
    if (!takes_value && value) {
      return bad(name.rfind("--", 0) == 0 ? "option " + name + " takes no value"
                                          : "unknown option '" + arg + "'");
    }

    if (name == "-h" || name == "--help") {
      opts.show_help = true;
      return opts;
    } else if (name == "--version") {
      opts.show_version = true;
      return opts;
    } else if (name == "--tag-output") {
      opts.tag_output = true;
    } else if (name == "--no-tag-output") {
      opts.tag_output = false;
    } else if (name == "-n" || name == "--nproc") {
      long n = 0;
      if (!parse_int(*value, n) || n < 1 || n > kMaxRanks) {
        return bad("-n wants a number of ranks from 1 to " + std::to_string(kMaxRanks) + ", got '" +
                   *value + "'");
      }
      opts.num_ranks = static_cast<int>(n);
      have_n = true;
    } else if (name == "--transport") {
      if (*value != "auto" && *value != "nccl" && *value != "ucx" && *value != "tcp") {
        return bad("--transport must be auto, nccl, ucx or tcp, got '" + *value + "'");
      }
      opts.transport = *value;
    } else if (name == "--inject") {
      // The syntax is the ranks' business: they reject a malformed spec at start-up.
      if (value->empty()) return bad("--inject needs a non-empty fault spec");
      opts.inject = *value;
    } else if (name == "--timeout") {
      double s = 0;
      if (!parse_seconds(*value, s) || s <= 0) {
        return bad("--timeout wants a positive number of seconds, got '" + *value + "'");
      }
      opts.timeout_s = s;
    } else if (name == "--linger") {
      if (!parse_seconds(*value, opts.linger_s)) {
        return bad("--linger wants a number of seconds >= 0, got '" + *value + "'");
      }
    } else if (name == "--grace") {
      if (!parse_seconds(*value, opts.grace_s)) {
        return bad("--grace wants a number of seconds >= 0, got '" + *value + "'");
      }
    } else if (name == "--store-port") {
      long port = 0;
      if (!parse_int(*value, port) || port < 0 || port > 65535) {
        return bad("--store-port wants a port from 0 to 65535, got '" + *value + "'");
      }
      opts.store_port = static_cast<uint16_t>(port);
    } else if (name == "--bind-to") {
      if (*value != "core" && *value != "none" && *value != "auto") {
        return bad("--bind-to must be core, none or auto, got '" + *value + "'");
      }
      opts.bind_to = *value;
    } else if (name == "--store-host") {
      if (value->empty() || value->find_first_of(" \t/") != std::string::npos) {
        return bad("--store-host wants a numeric address or a host name, got '" + *value + "'");
      }
      opts.store_host = *value;
    } else {
      return bad("unknown option '" + arg + "'");
    }
  }
  opts.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  if (!have_n) return bad("missing -n N (the number of ranks)");
  if (opts.command.empty()) return bad("no program to run (expected: -- PROGRAM [ARGS...])");
  return opts;
}

Result<std::string> resolve_program(const std::string& program) {
  if (program.empty()) return bad("the program name is empty");
  // Empty string: runnable; otherwise why not.
  auto problem_with = [](const std::string& path) -> std::string {
    struct stat st {};
    // As execvp, only a permission problem is worth more than "not there".
    if (::stat(path.c_str(), &st) != 0) return std::strerror(errno == EACCES ? EACCES : ENOENT);
    if (S_ISDIR(st.st_mode)) return "is a directory";
    if (!S_ISREG(st.st_mode)) return "is not a regular file";
    if (::access(path.c_str(), X_OK) != 0) return "is not executable";
    return "";
  };

  if (program.find('/') != std::string::npos) {
    std::string problem = problem_with(program);
    if (!problem.empty()) return bad("cannot run '" + program + "': " + problem);
    return program;
  }
  // execvp's search: PATH entries in order; an empty entry is the current directory.
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path ? env_path : "/bin:/usr/bin";
  const std::string kMissing = std::strerror(ENOENT);
  std::string first_problem;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = std::min(path.find(':', start), path.size());
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    std::string problem = problem_with(candidate);
    if (problem.empty()) return candidate;
    if (first_problem.empty() && problem != kMissing) first_problem = candidate + " " + problem;
    start = end + 1;
  }
  if (!first_problem.empty()) return bad("cannot run '" + program + "': " + first_problem);
  return bad("cannot find program '" + program + "' in PATH");
}

}  // namespace rcoll::launcher
