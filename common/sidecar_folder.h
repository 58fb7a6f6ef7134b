// The files of the folder a worker's agent shares with its training program
// (docs/sidecar-protocol.md), named once for the agent, the C++ SDK and
// `kubeps run`, which must agree on them.
#ifndef KUBEPS_COMMON_SIDECAR_FOLDER_H_
#define KUBEPS_COMMON_SIDECAR_FOLDER_H_

#include <sys/un.h>

#include <cstddef>

namespace kubeps {

// The agent listens here...
inline constexpr const char* kAgentSocketName = "agent.sock";
// ...and then says it serves, with the nonce a client presents.
inline constexpr const char* kAgentFileName = "agent.json";
// The longest path a Unix socket can bind to (sun_path, less its NUL).
inline constexpr std::size_t kMaxSocketPathBytes = sizeof(sockaddr_un{}.sun_path) - 1;

}  // namespace kubeps

#endif  // KUBEPS_COMMON_SIDECAR_FOLDER_H_
