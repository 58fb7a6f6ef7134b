#include "tools/checkpoint_reshard.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <tuple>

#include "common/stop_token.h"
#include "ps-server/checkpoint_folder_lock.h"
#include "ps-server/checkpoint_store.h"

namespace kubeps::tools {

namespace fs = std::filesystem;

namespace {

using PartState = v1::ShardCheckpoint::PartState;

// One tensor put back together from its pieces on the old servers.
struct WholeTensor {
  uint64_t elements = 0;
  std::string value, slot1, slot2;  // float32 bytes, the whole tensor each (slots may be empty)
  uint64_t version = 0;
  uint64_t optimizer_steps = 0;
  std::string name;
};

std::string DescribeTensor(uint32_t key, const std::string& name) {
  return "tensor " + std::to_string(key) + (name.empty() ? "" : " (" + name + ")");
}

// The header every new checkpoint shares: the old ones' but for what a
// server holds of its own.
Status CommonHeader(const std::vector<v1::ShardCheckpoint>& from, int servers,
                    v1::ShardCheckpoint* header) {
  const v1::ShardCheckpoint& first = from.front();
  for (size_t i = 0; i < from.size(); ++i) {
    const v1::ShardCheckpoint& c = from[i];
    const std::string which = "the checkpoint of server-" + std::to_string(i);
    if (c.step() != first.step())
      return Status::InvalidArgument(which + " is of step " + std::to_string(c.step()) +
                                     ", server-0's of step " + std::to_string(first.step()));
    if (c.server_count() != 0 && c.server_count() != from.size())
      return Status::InvalidArgument(which + " was written by a job of " +
                                     std::to_string(c.server_count()) + " servers, but " +
                                     std::to_string(from.size()) + " folders hold step " +
                                     std::to_string(first.step()));
    if (c.optimizer() != first.optimizer() || c.mode() != first.mode())
      return Status::InvalidArgument(which + " was written with optimizer \"" + c.optimizer() +
                                     "\" in mode \"" + c.mode() + "\", server-0's with \"" +
                                     first.optimizer() + "\" in \"" + first.mode() + "\"");
  }
  *header = first;
  header->clear_parts();
  header->clear_senders();
  header->clear_part_count();
  header->set_server_count(static_cast<uint32_t>(servers));
  // An async worker's step is the most any shard applied of its pushes (as
  // the scheduler reads it), and unknown where one shard did not keep it.
  header->clear_async_worker_steps();
  const bool all_know = std::all_of(from.begin(), from.end(), [](const v1::ShardCheckpoint& c) {
    return c.has_async_worker_steps();
  });
  if (all_know) {
    auto* steps = header->mutable_async_worker_steps()->mutable_next_step();
    for (const auto& c : from)
      for (const auto& [rank, next] : c.async_worker_steps().next_step())
        (*steps)[rank] = std::max((*steps)[rank], next);
  }
  return Status::Ok();
}

// Every tensor, by key, from the pieces the old servers hold.
Status PutTogether(const std::vector<v1::ShardCheckpoint>& from,
                   std::vector<WholeTensor>* tensors) {
  std::vector<const PartState*> pieces;
  for (const auto& c : from)
    for (const auto& part : c.parts()) pieces.push_back(&part);
  std::sort(pieces.begin(), pieces.end(), [](const PartState* a, const PartState* b) {
    return std::make_pair(a->key(), a->offset()) < std::make_pair(b->key(), b->offset());
  });
  tensors->clear();
  for (const PartState* piece : pieces) {
    const uint32_t key = piece->key();
    if (key > tensors->size())
      return Status::InvalidArgument(DescribeTensor(static_cast<uint32_t>(tensors->size()), "") +
                                     " is in no server's checkpoint (tensor " +
                                     std::to_string(key) + " is)");
    const bool first_piece = key == tensors->size();
    if (first_piece) tensors->emplace_back();
    WholeTensor& whole = (*tensors)[key];
    const std::string what = DescribeTensor(key, piece->name());
    const uint64_t elements = piece->value().size() / sizeof(float);
    if (piece->value().size() % sizeof(float) != 0 || elements == 0)
      return Status::InvalidArgument(what + ": a piece of " +
                                     std::to_string(piece->value().size()) + " bytes");
    if (piece->offset() != whole.elements)
      return Status::InvalidArgument(
          what + ": " +
          (piece->offset() > whole.elements
               ? "elements " + std::to_string(whole.elements) + " to " +
                     std::to_string(piece->offset()) + " are in no server's checkpoint"
               : "element " + std::to_string(piece->offset()) + " is in two checkpoints"));
    for (const std::string* slot : {&piece->slot1(), &piece->slot2()}) {
      if (!slot->empty() && slot->size() != piece->value().size())
        return Status::InvalidArgument(what + ": optimizer state of " +
                                       std::to_string(slot->size()) + " bytes for " +
                                       std::to_string(piece->value().size()) + " of values");
    }
    if (first_piece) {
      whole.version = piece->version();
      whole.optimizer_steps = piece->optimizer_steps();
      whole.name = piece->name();
    } else if (piece->version() != whole.version ||
               piece->optimizer_steps() != whole.optimizer_steps ||
               piece->slot1().empty() != whole.slot1.empty() ||
               piece->slot2().empty() != whole.slot2.empty()) {
      // A piece cut again would mix states of two moments.
      return Status::InvalidArgument(
          what + ": its pieces were updated " + std::to_string(whole.optimizer_steps) + " and " +
          std::to_string(piece->optimizer_steps()) + " times (versions " +
          std::to_string(whole.version) + " and " + std::to_string(piece->version()) + ")");
    }
    whole.value += piece->value();
    whole.slot1 += piece->slot1();
    whole.slot2 += piece->slot2();
    whole.elements += elements;
  }
  return Status::Ok();
}

std::vector<uint64_t> SizesOf(const std::vector<WholeTensor>& tensors) {
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.elements);
  return sizes;
}

std::string Slice(const std::string& bytes, const Part& part) {
  if (bytes.empty()) return "";
  return bytes.substr(part.offset * sizeof(float), part.length * sizeof(float));
}

}  // namespace

Status ReshardCheckpoints(const std::vector<v1::ShardCheckpoint>& from, int servers,
                          const PlacementOptions& placement, std::vector<v1::ShardCheckpoint>* to) {
  if (from.empty() || servers < 1)
    return Status::InvalidArgument(
        "resharding takes the checkpoints of at least one server "
        "into at least one");
  v1::ShardCheckpoint header;
  if (Status s = CommonHeader(from, servers, &header); !s.ok()) return s;
  std::vector<WholeTensor> tensors;
  if (Status s = PutTogether(from, &tensors); !s.ok()) return s;
  to->assign(static_cast<size_t>(servers), header);
  for (const Part& part : PlaceTensors(SizesOf(tensors), servers, placement)) {
    const WholeTensor& whole = tensors[part.key];
    PartState* out = (*to)[static_cast<size_t>(part.server)].add_parts();
    out->set_key(part.key);
    out->set_offset(part.offset);
    out->set_version(whole.version);
    out->set_optimizer_steps(whole.optimizer_steps);
    out->set_name(whole.name);
    out->set_value(Slice(whole.value, part));
    out->set_slot1(Slice(whole.slot1, part));
    out->set_slot2(Slice(whole.slot2, part));
  }
  return Status::Ok();
}

bool PlacedAsBy(const std::vector<v1::ShardCheckpoint>& checkpoints, int servers,
                const PlacementOptions& placement) {
  if (checkpoints.size() != static_cast<size_t>(servers)) return false;
  std::vector<WholeTensor> tensors;
  if (!PutTogether(checkpoints, &tensors).ok()) return false;
  using Held = std::tuple<int, uint32_t, uint64_t, uint64_t>;  // server, key, offset, length
  std::set<Held> held, placed;
  for (size_t s = 0; s < checkpoints.size(); ++s)
    for (const auto& part : checkpoints[s].parts())
      held.emplace(static_cast<int>(s), part.key(), part.offset(),
                   part.value().size() / sizeof(float));
  for (const Part& part : PlaceTensors(SizesOf(tensors), servers, placement))
    placed.emplace(part.server, part.key, part.offset, part.length);
  return held == placed;
}

namespace {

// The old servers' folders, "server-0" to "server-<n-1>", in rank order.
Status ServerFolders(const std::string& folder, std::vector<std::string>* dirs) {
  static const std::regex kServerFolder("server-(0|[1-9][0-9]{0,5})");
  std::error_code error;
  std::set<int> ranks;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    std::smatch match;
    const std::string name = it->path().filename().string();
    std::error_code type_error;
    if (std::regex_match(name, match, kServerFolder) && it->is_directory(type_error))
      ranks.insert(std::stoi(match[1]));
  }
  if (error) return Status::Error("cannot list " + folder + ": " + error.message());
  if (ranks.empty())
    return Status::NotFound("no checkpoints in " + folder + ": it holds no server-<i> folder");
  if (*ranks.rbegin() + 1 != static_cast<int>(ranks.size()))
    return Status::InvalidArgument(folder + " holds " + std::to_string(ranks.size()) +
                                   " server folders, up to server-" +
                                   std::to_string(*ranks.rbegin()) + ": one is missing");
  for (int rank : ranks) dirs->push_back(folder + "/server-" + std::to_string(rank));
  return Status::Ok();
}

// Holds each folder for this process, refusing at once where a server
// holds one: resharding under a running job would lose its checkpoints.
Status HoldAll(const std::vector<std::string>& dirs,
               std::vector<std::unique_ptr<CheckpointStore>>* stores) {
  const FolderHolder me = FolderHolder::ThisProcess("kubeps-reshard-" + std::to_string(::getpid()),
                                                    "kubeps reshard", "reshard");
  for (const std::string& dir : dirs) {
    std::unique_ptr<CheckpointStore> store;
    if (Status s = CheckpointStore::Open(dir, &store); !s.ok()) return s;
    StopToken give_up;
    FolderLockWait waiting;
    waiting.other_run_grace = std::chrono::seconds(0);
    waiting.on_wait = [&give_up](std::chrono::milliseconds) { give_up.RequestStop(); };
    if (Status s = store->Hold(me, &give_up, waiting); !s.ok())
      return Status::FailedPrecondition(dir + " is in use (" + s.message() +
                                        "): stop the job that runs on it first");
    stores->push_back(std::move(store));
  }
  return Status::Ok();
}

// The newest step every store holds.
Status NewestCommonStep(const std::vector<std::unique_ptr<CheckpointStore>>& stores,
                        uint64_t* step) {
  std::map<uint64_t, size_t> holders;
  std::string held;
  for (const auto& store : stores) {
    std::vector<uint64_t> steps;
    if (Status s = store->Steps(&steps); !s.ok()) return s;
    for (uint64_t st : steps) ++holders[st];
    held += (held.empty() ? "" : "; ") + store->dir() + " holds " + std::to_string(steps.size()) +
            (steps.empty() ? " steps" : " steps up to " + std::to_string(steps.back()));
  }
  for (auto it = holders.rbegin(); it != holders.rend(); ++it) {
    if (it->second == stores.size()) {
      *step = it->first;
      return Status::Ok();
    }
  }
  return Status::FailedPrecondition("the servers hold no checkpoint step in common: " + held);
}

// A name under `folder` nothing has yet.
std::string FreeName(const std::string& folder, const std::string& name) {
  std::string candidate = folder + "/" + name;
  for (int n = 2; fs::exists(candidate); ++n)
    candidate = folder + "/" + name + "-" + std::to_string(n);
  return candidate;
}

Status Rename(const std::string& from, const std::string& to) {
  std::error_code error;
  fs::rename(from, to, error);
  if (error) return Status::Error("cannot move " + from + " to " + to + ": " + error.message());
  return Status::Ok();
}

}  // namespace

Status ReshardFolder(const std::string& folder, int servers, const PlacementOptions& placement,
                     ReshardReport* report) {
  std::vector<std::string> old_dirs;
  if (Status s = ServerFolders(folder, &old_dirs); !s.ok()) return s;
  std::vector<std::unique_ptr<CheckpointStore>> stores;
  if (Status s = HoldAll(old_dirs, &stores); !s.ok()) return s;
  uint64_t step = 0;
  if (Status s = NewestCommonStep(stores, &step); !s.ok()) return s;
  std::vector<v1::ShardCheckpoint> from(stores.size());
  for (size_t i = 0; i < stores.size(); ++i)
    if (Status s = stores[i]->Read(step, &from[i]); !s.ok()) return s;
  std::vector<v1::ShardCheckpoint> to;
  if (Status s = ReshardCheckpoints(from, servers, placement, &to); !s.ok())
    return s.Prefixed("the checkpoints of step " + std::to_string(step) + " in " + folder +
                      " cannot be resharded: ");
  *report = ReshardReport{step, static_cast<int>(from.size()), 0, 0, ""};
  for (const auto& c : to) {
    for (const auto& part : c.parts()) {
      report->tensors += part.offset() == 0 ? 1 : 0;
      report->bytes += part.value().size() + part.slot1().size() + part.slot2().size();
    }
  }
  if (PlacedAsBy(from, servers, placement)) return Status::Ok();

  // Written whole beside the old folders first: a reshard killed here
  // leaves them as they were (and its staging folder, which the next one
  // replaces).
  const std::string staging = folder + "/.reshard-step-" + std::to_string(step);
  std::error_code error;
  fs::remove_all(staging, error);
  for (int j = 0; j < servers; ++j) {
    std::unique_ptr<CheckpointStore> store;
    if (Status s = CheckpointStore::Open(staging + "/server-" + std::to_string(j), &store); !s.ok())
      return s;
    if (Status s = store->Write(to[static_cast<size_t>(j)]); !s.ok()) return s;
  }
  report->moved_aside = FreeName(folder, "before-reshard-" + std::to_string(from.size()) +
                                             "-servers-step-" + std::to_string(step));
  fs::create_directory(report->moved_aside, error);
  if (error) return Status::Error("cannot make " + report->moved_aside + ": " + error.message());
  for (const std::string& dir : old_dirs)
    if (Status s = Rename(dir, report->moved_aside + dir.substr(folder.size())); !s.ok()) return s;
  for (int j = 0; j < servers; ++j) {
    const std::string name = "/server-" + std::to_string(j);
    if (Status s = Rename(staging + name, folder + name); !s.ok()) return s;
  }
  fs::remove(staging, error);
  return Status::Ok();
}

}  // namespace kubeps::tools
