// weft — thread identity and time: what instrumentation and synchronization stress tests use.
//
// A tile operation runs on a group of threads: the whole block, or inside async_tasks one replica of a
// task. Per-thread quantities are therefore tiles with one element per thread of that group — shape
// [threads], where threads is the kernel's num_warps * 32 (or the task's warps * 32 inside a task body) —
// and element t belongs to thread t of the group. Rank-0 values stay what they are everywhere in weft:
// the same in every thread, so control flow on them never diverges; pick a thread's element with a mask
// (`store(log + lane_id(), t, lane_id() == 0)`) or reduce (`max(clock64(), 0)`).
//
//   Long t0 = clock64();
//   ... the code to time ...
//   store(out + program_id(0) * 128 + thread_id(), clock64() - t0);   // cycles per thread
//
// In a kernel with async_tasks these are only offered inside the task bodies (the block's threads are
// the tasks' threads, which are not known before async_tasks), and the group's threads must be a power of
// two (a task of 4 or 8 warps, say), as for every tile.
#pragma once

#include "weft/ops.h"

namespace weft {

namespace detail {
inline NodeRef thread_query(Op op, int kind, SourceLoc loc) {
  Attrs a;
  a.ints = {group_threads(loc), kind};
  return emit(op, {}, std::move(a), loc);
}
}  // namespace detail

// Each thread's index in its group, 0 .. threads - 1 (%tid.x, minus the first thread of the task replica
// inside a task).
inline Int thread_id(SourceLoc loc = SourceLoc::current()) { return Int(detail::thread_query(detail::Op::ThreadIndex, 0, loc)); }
// Each thread's lane in its warp, 0 .. 31: thread_id() % 32 (the group's warps are whole warps, so this is
// %laneid).
inline Int lane_id(SourceLoc loc = SourceLoc::current()) { return Int(detail::thread_query(detail::Op::ThreadIndex, 1, loc)); }
// Each thread's warp in its group: thread_id() / 32.
inline Int warp_id(SourceLoc loc = SourceLoc::current()) { return Int(detail::thread_query(detail::Op::ThreadIndex, 2, loc)); }
// Each thread's warp group (4 warps, what wgmma runs on) in its group: thread_id() / 128.
inline Int warp_group_id(SourceLoc loc = SourceLoc::current()) {
  return Int(detail::thread_query(detail::Op::ThreadIndex, 3, loc));
}

// Each thread's cycle counter (mov.u64 %rd, %clock64: the SM's clock, counted per SM, so only differences
// within one block mean something). CPU backend: the host's time-stamp counter (llvm.readcyclecounter:
// rdtsc on x86), one reading per element.
inline Long clock64(SourceLoc loc = SourceLoc::current()) { return Long(detail::thread_query(detail::Op::ReadClock, 0, loc)); }
// Each thread's reading of the global timer in nanoseconds (mov.u64 %rd, %globaltimer: one clock for the
// whole GPU, so blocks can be compared; it advances in steps of about a microsecond on some GPUs). CPU
// backend: CLOCK_REALTIME in nanoseconds (clock_gettime), one reading per element.
inline Long global_timer(SourceLoc loc = SourceLoc::current()) {
  return Long(detail::thread_query(detail::Op::ReadClock, 1, loc));
}

// Each thread sleeps for about `nanoseconds` (nanosleep.u32: the hardware sleeps between 0 and twice that,
// at most 1 ms, and may wake a warp's threads together). A scalar: every thread the same time; a tile of
// one element per thread (e.g. computed from thread_id()): each its own — a way to shake the order in which
// warps reach a barrier. Negative durations count as 0. It changes no value: the CPU backend ignores it
// (WEFT_CPU_SCHED_SEED shuffles its fibers instead).
template <class D>
  requires detail::TileOrLiteral<D>
void nanosleep(const D& nanoseconds, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::Nanosleep, {detail::value_of<int32_t>(nanoseconds, loc)}, {}, loc);
}

// Each thread's warp-wide vote (TLX's vote_ballot_sync; PTX vote.sync.ballot.b32): bit l of a thread's result
// is set when lane l of the thread's warp has `pred` true and bit l of `member_mask` is set. `pred` is one value
// per thread — a tile of shape [threads], element t thread t's (e.g. thread_id() < 16) — or a scalar, the same
// in every lane (the result is then member_mask or 0); the result has pred's shape. Every lane of a warp votes
// (weft runs each tile operation on all threads of the group, so there is no lane outside the vote); lanes
// outside member_mask count as false. E.g. with one warp, vote_ballot_sync(0xffffffff, thread_id() < 16) is
// 0x0000ffff in every thread.
inline Int vote_ballot_sync(uint32_t member_mask, const Bool& pred, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {detail::group_threads(loc), int64_t(member_mask)};
  return Int(detail::emit(detail::Op::VoteBallot, {detail::node_of(pred, loc)}, std::move(a), loc));
}

}  // namespace weft
