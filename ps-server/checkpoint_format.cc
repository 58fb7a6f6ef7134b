#include "ps-server/checkpoint_format.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>

#include <google/protobuf/field_mask.pb.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/util/field_mask_util.h>

namespace kubeps {
namespace {

using google::protobuf::MessageLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::ZeroCopyInputStream;
using google::protobuf::io::ZeroCopyOutputStream;

constexpr char kMagic[] = "KUBEPSCK";
constexpr int kMagicSize = sizeof kMagic - 1;
constexpr uint32_t kFormatVersion = 2;

// The CRC-32 of the bytes that pass through it. A buffer is summed once its
// user is done with it: when it hands back what it did not use, at the next
// Next() (before the stream below reuses its memory), or when asked for the
// sum.
class Crc {
 public:
  void Fold() {
    if (pending_size_ > 0) crc_ = crc32_z(crc_, pending_, static_cast<z_size_t>(pending_size_));
    pending_size_ = 0;
  }
  void Hand(const void* data, int size) {
    pending_ = static_cast<const Bytef*>(data);
    pending_size_ = size;
  }
  void Return(int count) { pending_size_ -= count; }
  uint32_t Sum() {
    Fold();
    return static_cast<uint32_t>(crc_);
  }

 private:
  uLong crc_ = crc32_z(0, Z_NULL, 0);
  const Bytef* pending_ = nullptr;
  int pending_size_ = 0;
};

class SummedOutput : public ZeroCopyOutputStream {
 public:
  explicit SummedOutput(ZeroCopyOutputStream* out) : out_(out) {}
  bool Next(void** data, int* size) override {
    crc_.Fold();
    if (!out_->Next(data, size)) return false;
    crc_.Hand(*data, *size);
    return true;
  }
  void BackUp(int count) override {  // after the last write into the buffer
    crc_.Return(count);
    crc_.Fold();  // now: a failed flush in BackUp(0) frees the buffer
    out_->BackUp(count);
  }
  int64_t ByteCount() const override { return out_->ByteCount(); }
  uint32_t Sum() { return crc_.Sum(); }

 private:
  ZeroCopyOutputStream* out_;
  Crc crc_;
};

class SummedInput : public ZeroCopyInputStream {
 public:
  explicit SummedInput(ZeroCopyInputStream* in) : in_(in) {}
  bool Next(const void** data, int* size) override {
    crc_.Fold();
    if (!in_->Next(data, size)) return false;
    crc_.Hand(*data, *size);
    return true;
  }
  void BackUp(int count) override {
    crc_.Return(count);
    crc_.Fold();
    in_->BackUp(count);
  }
  bool Skip(int count) override {  // through Next, so that the skipped bytes are summed
    const void* data;
    int size;
    while (count > 0) {
      if (!Next(&data, &size)) return false;
      if (size > count) BackUp(size - count);
      count -= size;
    }
    return true;
  }
  int64_t ByteCount() const override { return in_->ByteCount(); }
  uint32_t Sum() { return crc_.Sum(); }

 private:
  ZeroCopyInputStream* in_;
  Crc crc_;
};

// A coded stream per record: its byte counts are ints, and a file may be
// bigger than 2 GiB. Each hands back what it did not use when it goes.
bool WriteRecord(const MessageLite& message, ZeroCopyOutputStream* out) {
  const size_t size = message.ByteSizeLong();
  if (size > INT_MAX) return false;
  CodedOutputStream coded(out);
  coded.WriteVarint32(static_cast<uint32_t>(size));
  message.SerializeWithCachedSizes(&coded);
  return !coded.HadError();
}

bool ReadRecord(ZeroCopyInputStream* in, MessageLite* message) {
  CodedInputStream coded(in);
  uint32_t size;
  if (!coded.ReadVarint32(&size) || size > INT_MAX) return false;
  const CodedInputStream::Limit limit = coded.PushLimit(static_cast<int>(size));
  // Where the file ends early, the parse stops there, short of the limit.
  if (!message->ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage() ||
      coded.BytesUntilLimit() != 0)
    return false;
  coded.PopLimit(limit);
  return true;
}

bool WriteFixed32(uint32_t value, ZeroCopyOutputStream* out) {
  CodedOutputStream coded(out);
  coded.WriteLittleEndian32(value);
  return !coded.HadError();
}

bool ReadFixed32(ZeroCopyInputStream* in, uint32_t* value) {
  CodedInputStream coded(in);
  return coded.ReadLittleEndian32(value);
}

// A file of this format, from its start; *version: the format it says it is.
bool ReadFramed(ZeroCopyInputStream* in, v1::ShardCheckpoint* checkpoint, uint32_t* version) {
  SummedInput summed(in);
  {
    CodedInputStream coded(&summed);
    char magic[kMagicSize];
    if (!coded.ReadRaw(magic, kMagicSize) || !coded.ReadLittleEndian32(version)) return false;
    if (*version != kFormatVersion) return false;
  }
  if (!ReadRecord(&summed, checkpoint)) return false;
  const uint64_t parts = checkpoint->part_count();
  checkpoint->clear_part_count();
  for (uint64_t i = 0; i < parts; ++i) {
    if (!ReadRecord(&summed, checkpoint->add_parts())) return false;
  }
  const uint32_t sum = summed.Sum();
  uint32_t written_sum;
  const void* data;
  int size;
  return ReadFixed32(in, &written_sum) && written_sum == sum && !in->Next(&data, &size);
}

}  // namespace

bool WriteCheckpointFile(const v1::ShardCheckpoint& checkpoint, ZeroCopyOutputStream* out) {
  SummedOutput summed(out);
  {
    CodedOutputStream coded(&summed);
    coded.WriteRaw(kMagic, kMagicSize);
    coded.WriteLittleEndian32(kFormatVersion);
    if (coded.HadError()) return false;
  }
  // Every field but the parts (a copy of those would double the state),
  // a field added later included.
  static const google::protobuf::FieldMask* const all_but_parts = [] {
    auto* mask = new google::protobuf::FieldMask;
    const google::protobuf::Descriptor* fields = v1::ShardCheckpoint::descriptor();
    for (int i = 0; i < fields->field_count(); ++i) {
      if (fields->field(i)->number() != v1::ShardCheckpoint::kPartsFieldNumber)
        mask->add_paths(fields->field(i)->name());
    }
    return mask;
  }();
  v1::ShardCheckpoint header;
  google::protobuf::util::FieldMaskUtil::MergeMessageTo(checkpoint, *all_but_parts, {}, &header);
  header.set_part_count(checkpoint.parts_size());
  if (!WriteRecord(header, &summed)) return false;
  for (const auto& part : checkpoint.parts()) {
    if (!WriteRecord(part, &summed)) return false;
  }
  return WriteFixed32(summed.Sum(), out);
}

Status ReadCheckpointFile(int fd, const std::string& path, v1::ShardCheckpoint* checkpoint,
                          bool* damaged) {
  *damaged = false;
  checkpoint->Clear();
  // The magic is read apart: a first read() that returns fewer bytes (a
  // network file system may) cannot pass a file for one of the format before.
  char head[kMagicSize];
  ssize_t got = 0;
  while (got < kMagicSize) {
    const ssize_t n = ::pread(fd, head + got, kMagicSize - got, got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Error("cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    got += n;
  }
  const bool framed = got == kMagicSize && std::memcmp(head, kMagic, kMagicSize) == 0;
  google::protobuf::io::FileInputStream file(fd, kCheckpointFileBlock);
  bool parsed = false;
  uint32_t version = kFormatVersion;
  if (!framed) {  // written before this format; never empty (step 0 has parts)
    parsed = got > 0 && checkpoint->ParseFromZeroCopyStream(&file);
  } else {
    parsed = ReadFramed(&file, checkpoint, &version);
  }
  if (file.GetErrno() != 0)
    return Status::Error("cannot read " + path + ": " + std::strerror(file.GetErrno()));
  if (version != kFormatVersion) {
    return Status::FailedPrecondition("checkpoint " + path + " is of format " +
                                      std::to_string(version) + ", which this kubeps (format " +
                                      std::to_string(kFormatVersion) +
                                      ") cannot read: a newer kubeps wrote it");
  }
  if (!parsed) {
    *damaged = true;
    return Status::Error("checkpoint " + path + " is damaged");
  }
  return Status::Ok();
}

}  // namespace kubeps
