// Files of a server's checkpoint folder replaced whole or not at all, and
// read whole: the checkpoints and the run mark (checkpoint_store.h), and the
// folder's owner record (checkpoint_folder_lock.h).
#ifndef KUBEPS_PS_SERVER_DURABLE_FILE_H_
#define KUBEPS_PS_SERVER_DURABLE_FILE_H_

#include <cstdint>
#include <functional>
#include <string>

#include <google/protobuf/io/zero_copy_stream.h>

#include "common/status.h"

namespace kubeps {

// What a replacement's temporary file ends with: "<path>.tmp".
inline constexpr char kTemporarySuffix[] = ".tmp";

// Replaces `path` in `dir` whole or not at all: `write` fills "<path>.tmp",
// which is flushed and renamed over `path` (unless `before_rename` says
// otherwise), then the folder is flushed. A crash leaves the file before or
// the file after, never a torn one (and a temporary file, which the folder's
// next holder removes). A write that fails removes its temporary file: on a
// full volume it holds what space there was. A folder that cannot be flushed
// after the rename is logged as an error, not returned: the file is in place
// and whole, but its entry may not survive a crash of the node.
Status ReplaceDurably(
    const std::string& dir, const std::string& path,
    const std::function<bool(google::protobuf::io::ZeroCopyOutputStream*)>& write,
    const std::function<Status()>& before_rename = [] { return Status::Ok(); });
// The same with `text` as the contents.
Status ReplaceDurably(const std::string& dir, const std::string& path, const std::string& text);

// Flushes the entries of folder `dir` (its renames) to the disk: 0, or the
// error. A file system that cannot flush folders, or a folder this process may
// not open, is no error: it keeps its entries as it keeps them.
int SyncFolder(const std::string& dir);

// How many times, in this process, a folder could not be flushed after a
// replacement's rename (each is logged too): a disk that fails.
uint64_t FoldersNotFlushed();

// The whole of `path` into *contents: NotFound where there is no such file;
// another error where it cannot be read now.
Status ReadWholeFile(const std::string& path, std::string* contents);

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_DURABLE_FILE_H_
