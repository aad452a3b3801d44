// SPDX-License-Identifier: GPL-2.0
// Every task's run time in one read (an `iter/task` program): for each
// thread, its thread group, its id, the nanoseconds it has run, its
// context switches and its storage I/O. The processes collector reads
// `/proc/PID/stat` only for the processes whose time moved, instead of a
// `/proc` walk and a file per process to find them, and no `io` or
// `status` at all: a group leader's record carries, added to its own, what
// its group's exited threads did (the signal struct's totals), so the sum
// over a thread group is what `/proc/PID/io` and `/proc/PID/status` say.
// Each record also carries the thread's scheduler state (the leader's is
// the process's, as `/proc/PID/stat` reports it) and whether it is a
// kernel thread: a kernel thread that ran needs no `stat` read at all.
// The structs are the few fields read, relocated against the running
// kernel's BTF (CO-RE), so one object fits every kernel.

#include "common.h"

struct sched_entity {
    u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

struct task_io_accounting {
    u64 read_bytes;
    u64 write_bytes;
} __attribute__((preserve_access_index));

struct signal_struct {
    unsigned long nvcsw;
    unsigned long nivcsw;
    struct task_io_accounting ioac;
} __attribute__((preserve_access_index));

struct task_struct {
    unsigned int __state;
    int exit_state;
    unsigned int flags;
    int pid;
    int tgid;
    struct sched_entity se;
    unsigned long nvcsw;
    unsigned long nivcsw;
    struct task_io_accounting ioac;
    struct signal_struct *signal;
} __attribute__((preserve_access_index));

struct seq_file;

struct bpf_iter_meta {
    struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
    struct bpf_iter_meta *meta;
    struct task_struct *task;
} __attribute__((preserve_access_index));

static long (*bpf_seq_write)(struct seq_file *m, const void *data, u32 len) = (void *)127;

// PF_KTHREAD (include/linux/sched.h): a kernel thread.
#define PF_KTHREAD 0x00200000

// One record per task, 64 bytes: what src/tasks.rs reads.
struct rec {
    u32 tgid;
    u32 pid;
    u32 state;
    u32 exit_state;
    u32 kernel;
    u32 pad;
    u64 runtime_ns;
    u64 nvcsw;
    u64 nivcsw;
    u64 read_bytes;
    u64 write_bytes;
};

SEC("iter/task")
int tasks(struct bpf_iter__task *ctx) {
    struct task_struct *t = ctx->task;
    if (!t)
        return 0;
    struct rec r = {
        .tgid = t->tgid,
        .pid = t->pid,
        .state = t->__state,
        .exit_state = t->exit_state,
        .kernel = (t->flags & PF_KTHREAD) != 0,
        .runtime_ns = t->se.sum_exec_runtime,
        .nvcsw = t->nvcsw,
        .nivcsw = t->nivcsw,
        .read_bytes = t->ioac.read_bytes,
        .write_bytes = t->ioac.write_bytes,
    };
    struct signal_struct *sig = t->signal;
    if (t->pid == t->tgid && sig) {
        r.nvcsw += sig->nvcsw;
        r.nivcsw += sig->nivcsw;
        r.read_bytes += sig->ioac.read_bytes;
        r.write_bytes += sig->ioac.write_bytes;
    }
    bpf_seq_write(ctx->meta->seq, &r, sizeof r);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
