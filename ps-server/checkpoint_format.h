// The bytes of a checkpoint file. One protobuf message cannot hold a shard's
// state past 2 GiB (protobuf refuses to serialize or parse one that big,
// some 180 million Adam-trained floats), and a flipped bit in a float parses
// as well as the right one. So a file is framed:
//
//   "KUBEPSCK" | fixed32 format version (2)
//   | varint length, ShardCheckpoint without its parts (part_count set)
//   | part_count times: varint length, ShardCheckpoint.PartState
//   | fixed32 CRC-32 (zlib's) of every byte before it
//
// Each part is at most a few MiB (placement.h cuts big tensors), so no
// message nears the limit, and no copy of the whole state is ever made.
// Files written before this format (one ShardCheckpoint message, no magic)
// are still read; a kubeps from before this format sets these files aside as
// damaged (renamed, not deleted).
#ifndef KUBEPS_PS_SERVER_CHECKPOINT_FORMAT_H_
#define KUBEPS_PS_SERVER_CHECKPOINT_FORMAT_H_

#include <string>

#include <google/protobuf/io/zero_copy_stream.h>

#include "common/status.h"
#include "kubeps.pb.h"

namespace kubeps {

// A checkpoint is serialized straight into its file and parsed straight
// from it, this many bytes at a time: its bytes as one string would be a
// second copy of the shard's state, in fresh memory at every checkpoint.
inline constexpr int kCheckpointFileBlock = 1 << 20;

// False where the stream failed (its own error says why).
bool WriteCheckpointFile(const v1::ShardCheckpoint& checkpoint,
                         google::protobuf::io::ZeroCopyOutputStream* out);

// Reads the checkpoint in file `fd` (`path` names it in errors) from its
// start. *damaged: the bytes are not a whole checkpoint (cut short,
// malformed, not what was written: the checksum differs). An I/O error, or
// a file of a newer format (FailedPrecondition), is an error but no damage.
Status ReadCheckpointFile(int fd, const std::string& path, v1::ShardCheckpoint* checkpoint,
                          bool* damaged);

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_CHECKPOINT_FORMAT_H_
