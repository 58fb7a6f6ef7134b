// KUBEPS_EXPORT marks what the C++ SDK's shared library (libkubeps.so)
// exports. The library is compiled with -fvisibility=hidden, so only the
// classes and functions of the installed headers that carry this mark are
// visible to a program linking it; the KV client's internals, gRPC's and
// protobuf's stay inside. In the static libraries of the tree the mark
// changes nothing. Installed with kv_worker.h.
#ifndef KUBEPS_WORKER_AGENT_KV_SDK_EXPORT_H_
#define KUBEPS_WORKER_AGENT_KV_SDK_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define KUBEPS_EXPORT __attribute__((visibility("default")))
#else
#define KUBEPS_EXPORT
#endif

#endif  // KUBEPS_WORKER_AGENT_KV_SDK_EXPORT_H_
