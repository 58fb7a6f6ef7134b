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
// are still read.
#ifndef KUBEPS_PS_SERVER_CHECKPOINT_FORMAT_H_
#define KUBEPS_PS_SERVER_CHECKPOINT_FORMAT_H_

#include <google/protobuf/io/zero_copy_stream.h>

#include "kubeps.pb.h"

namespace kubeps {

// False where the stream failed (its own error says why).
bool WriteCheckpointFile(const v1::ShardCheckpoint& checkpoint,
                         google::protobuf::io::ZeroCopyOutputStream* out);

// False where the bytes are not a whole checkpoint: truncated, malformed, or
// not what was written (the checksum differs). A stream that failed reads
// as this too; its own error tells the two apart.
bool ReadCheckpointFile(google::protobuf::io::ZeroCopyInputStream* in,
                        v1::ShardCheckpoint* checkpoint);

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_CHECKPOINT_FORMAT_H_
