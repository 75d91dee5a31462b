#pragma once

#include <string>
#include <vector>

#define RCOLL_VERSION_MAJOR 0
#define RCOLL_VERSION_MINOR 1
#define RCOLL_VERSION_PATCH 0

namespace rcoll {
// "0.1.0 (transports: tcp[,ucx][,nccl])"
const char* version_string();
// The transports compiled into this library, in the default fallback order
// ("ucx", "tcp", ...). NCCL moves device buffers only.
std::vector<std::string> available_transports();
}  // namespace rcoll
