// Reading a file that holds a secret (the job's token, a TLS private key):
// the file must not be readable by other users, nor writable by its group,
// and the mode is checked on the file that is read (fstat of the open file),
// not on whatever the path names a moment earlier.
#ifndef KUBEPS_COMMON_PRIVATE_FILE_H_
#define KUBEPS_COMMON_PRIVATE_FILE_H_

#include <cstddef>
#include <string>

#include "common/status.h"

namespace kubeps {

// Up to `limit` bytes of `path`. `what` names the file in errors ("token
// file"), `secret` what it holds ("the job's token"): "token file F: mode
// 0644 lets other users read or change the job's token; make it 0600 or
// 0400 (a Secret volume: defaultMode 0400)".
Status ReadPrivateFile(const std::string& path, const std::string& what, const std::string& secret,
                       size_t limit, std::string* contents);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_PRIVATE_FILE_H_
