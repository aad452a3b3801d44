// SPDX-License-Identifier: GPL-2.0
// Every task's run time in one read (an `iter/task` program): for each
// thread, its thread group, its id and the nanoseconds it has run. The
// processes collector reads `/proc/PID/stat` only for the processes whose
// time moved, instead of a `/proc` walk and a file per process to find
// them. The structs are the few fields read, relocated against the
// running kernel's BTF (CO-RE), so one object fits every kernel.

#include "common.h"

struct sched_entity {
    u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

struct task_struct {
    int pid;
    int tgid;
    struct sched_entity se;
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

// One record per task, 16 bytes: what src/tasks.rs reads.
struct rec {
    u32 tgid;
    u32 pid;
    u64 runtime_ns;
};

SEC("iter/task")
int tasks(struct bpf_iter__task *ctx) {
    struct task_struct *t = ctx->task;
    if (!t)
        return 0;
    struct rec r = { .tgid = t->tgid, .pid = t->pid, .runtime_ns = t->se.sum_exec_runtime };
    bpf_seq_write(ctx->meta->seq, &r, sizeof r);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
