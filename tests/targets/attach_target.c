/*
 * attach_target.c - programs for the injector's end-to-end tests. Each mode
 * runs until the file STOP exists, then checks that nothing went wrong while
 * it was attached to, prints one result line per check and exits 0 if all
 * passed. Thread ids go to TIDS ("name tid" lines) so tests can choose the
 * thread the injector borrows.
 *
 *   attach_target MODE STOP TIDS [N]
 *   single     one thread: malloc/free and a checksum
 *   churn N    N threads of malloc/free churn with content checks
 *   block      threads blocked in read (pipe), futex wait, epoll_wait,
 *              nanosleep, sigtimedwait, recv with a timeout; each must
 *              complete its call normally
 *   handlers   own SIGSEGV and SIGTRAP handlers, which must still work after
 *   mallocinfo a thread in malloc_info() writing into a full pipe
 *   bigmalloc  N threads doing large (mmap'ed) malloc/free: often inside malloc
 *   dlopen     a thread looping dlopen/dlclose of LIB (argv[4]), whose
 *              constructor sleeps: often inside the loader
 *   seccomp    single, under an allow-everything seccomp filter
 *   strict     seccomp strict mode, blocked in read() until killed
 *   noclone    single, under a seccomp filter refusing clone and clone3
 *              (EPERM): no thread can be created
 *   idle N     N threads waiting on a condition variable (a quiet server)
 *   fork       churns; forks once when STOP.fork exists (the child's pid
 *              goes to TIDS as "child"); both churn until STOP
 *   ctorwait   a thread loops dlopen/dlclose of LIB (argv[4], built from
 *              attach_ctorwait.c) whose constructor waits until the main
 *              thread has ticked 20 more times: borrowing the main thread
 *              while the loader lock is held deadlocks the process
 *   threads    the main thread creates and joins short-lived threads in a
 *              loop (each does a few hundred malloc/free): thread-per-request
 *   inhandler  a thread spends its life inside a SIGUSR1 handler (sleeping
 *              and allocating there), which must return normally at STOP
 *   vfork      a thread vforks a child that waits (raw syscalls only) until
 *              STOP.exec exists, then execs /bin/true (TIDS: "vchild PID")
 *   forks      the main thread forks a short-lived child every 2 ms and
 *              waits for it (pre-fork servers, redis saving)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *stop_file;
static FILE *tids;
static pthread_mutex_t tid_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int stopping;
static int failures;

static int should_stop(void)
{
    if (atomic_load(&stopping)) return 1;
    struct stat st;
    if (stat(stop_file, &st) == 0) { atomic_store(&stopping, 1); return 1; }
    return 0;
}

static void wait_stop(void)
{
    while (!should_stop()) usleep(5000);
}

static void note_tid(const char *name)
{
    pthread_mutex_lock(&tid_mu);
    fprintf(tids, "%s %d\n", name, (int)gettid());
    fflush(tids);
    pthread_mutex_unlock(&tid_mu);
}

static void result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void result(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok" : "BAD");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (!ok) failures++;
}

/* ---------------------------------------------------------------- churn */
static uint64_t churn_thread_work(unsigned seed, long *ops, long *bad)
{
    void *slot[64] = { 0 };
    size_t len[64] = { 0 };
    uint64_t x = seed * 2654435761u + 1;
    while (!should_stop()) {
        for (int k = 0; k < 1000; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            int i = (int)(x % 64);
            if (slot[i]) {
                unsigned char *p = slot[i];
                for (size_t j = 0; j < len[i]; j += 61)
                    if (p[j] != (unsigned char)(i + j)) { (*bad)++; break; }
                free(p);
                slot[i] = NULL;
            } else {
                len[i] = 16 + (x >> 20) % 4000;
                unsigned char *p = malloc(len[i]);
                for (size_t j = 0; j < len[i]; j += 61) p[j] = (unsigned char)(i + j);
                slot[i] = p;
            }
            (*ops)++;
        }
    }
    for (int i = 0; i < 64; i++) free(slot[i]);
    return x;
}

typedef struct { int id; long ops, bad; } churn_arg;
static void *churn_main(void *a)
{
    churn_arg *c = a;
    char name[32];
    snprintf(name, sizeof name, "churn%d", c->id);
    note_tid(name);
    churn_thread_work((unsigned)c->id + 1, &c->ops, &c->bad);
    return NULL;
}

/* A structure built before any attach; its checksum must not change. */
typedef struct node { struct node *next; uint64_t v; } node;
static node *build_list(int n)
{
    node *h = NULL;
    for (int i = 0; i < n; i++) { node *x = malloc(sizeof *x); x->v = (uint64_t)i * 7919u; x->next = h; h = x; }
    return h;
}
static uint64_t list_sum(node *h) { uint64_t s = 0; for (; h; h = h->next) s = s * 31 + h->v; return s; }

static int mode_churn(int n)
{
    node *list = build_list(10000);
    uint64_t sum0 = list_sum(list);
    printf("checksum %llu\n", (unsigned long long)sum0);
    fflush(stdout);
    pthread_t th[256];
    churn_arg args[256];
    if (n > 256) n = 256;
    for (int i = 0; i < n; i++) { args[i] = (churn_arg){ i, 0, 0 }; pthread_create(&th[i], NULL, churn_main, &args[i]); }
    wait_stop();
    long ops = 0, bad = 0;
    for (int i = 0; i < n; i++) { pthread_join(th[i], NULL); ops += args[i].ops; bad += args[i].bad; }
    uint64_t sum1 = list_sum(list);
    result(bad == 0, "churn content checks (%ld ops, %ld bad)", ops, bad);
    result(sum1 == sum0, "checksum %llu", (unsigned long long)sum1);
    return 0;
}

/* errno is thread state too: whatever the injector runs on this thread
 * must leave it as it was (malloc and free keep it on success). */
static int mode_single(void)
{
    node *list = build_list(1000);
    uint64_t sum0 = list_sum(list);
    long ops = 0, bad = 0, errno_changed = 0;
    note_tid("main");
    while (!should_stop()) {
        errno = 4242;
        for (int k = 0; k < 100; k++) {
            void *p = malloc(64 + (size_t)k);
            ((volatile char *)p)[0] = 1;
            free(p);
            ops++;
        }
        if (errno != 4242) errno_changed++;
    }
    churn_thread_work(7, &ops, &bad);
    result(errno_changed == 0, "errno kept (%ld changes)", errno_changed);
    result(bad == 0 && list_sum(list) == sum0, "single (%ld ops)", ops);
    return 0;
}

/* ---------------------------------------------------------------- block */
static int pipefd[2], efd, sockfd[2];
static uint32_t futex_word;
static struct {
    long read_ret, futex_ret, epoll_ret, sleep_ret, sigwait_ret, recv_ret;
    int read_err, futex_err, epoll_err, sleep_err, sigwait_err, recv_err;
    double slept;
} blk;
static pthread_t blk_sigwait_th;

static void *blk_read(void *a)
{
    (void)a;
    note_tid("read");
    char buf[16] = { 0 };
    ssize_t n = read(pipefd[0], buf, sizeof buf);
    blk.read_err = errno;
    blk.read_ret = n == 5 && memcmp(buf, "hello", 5) == 0 ? 5 : (n < 0 ? n : -1000 - n);
    return NULL;
}
static void *blk_futex(void *a)
{
    (void)a;
    note_tid("futex");
    long r;
    do {
        r = syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    } while (r == -1 && errno == EAGAIN && atomic_load((_Atomic uint32_t *)&futex_word) == 0);
    blk.futex_err = errno;
    blk.futex_ret = r;
    return NULL;
}
static void *blk_epoll(void *a)
{
    (void)a;
    note_tid("epoll");
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 42 }, out;
    epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev);
    int n = epoll_wait(ep, &out, 1, -1);
    blk.epoll_err = errno;
    blk.epoll_ret = n == 1 && out.data.u32 == 42 ? 1 : (n < 0 ? n : -100);
    return NULL;
}
static void *blk_sleep(void *a)
{
    (void)a;
    note_tid("nanosleep");
    struct timespec t0, t1, d = { 2, 0 };
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r = nanosleep(&d, NULL);
    blk.sleep_err = errno;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    blk.sleep_ret = r;
    blk.slept = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    return NULL;
}

/* sigtimedwait and recv on a socket with a timeout return EINTR after a
 * mere stop (signal(7)): the injector must issue them again. */
static void *blk_sigwait(void *a)
{
    (void)a;
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    note_tid("sigtimedwait");
    struct timespec t = { 120, 0 };
    int r = sigtimedwait(&s, NULL, &t);
    blk.sigwait_err = errno;
    blk.sigwait_ret = r;
    return NULL;
}
static void *blk_recv(void *a)
{
    (void)a;
    struct timeval tv = { 120, 0 };
    setsockopt(sockfd[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    note_tid("recv");
    char buf[16] = { 0 };
    ssize_t n = recv(sockfd[0], buf, sizeof buf, 0);
    blk.recv_err = errno;
    blk.recv_ret = n == 5 && memcmp(buf, "howdy", 5) == 0 ? 5 : (n < 0 ? n : -1000 - n);
    return NULL;
}

static int mode_block(void)
{
    pthread_t th[6];
    if (pipe(pipefd) || socketpair(AF_UNIX, SOCK_STREAM, 0, sockfd)) return 1;
    efd = eventfd(0, 0);
    note_tid("main");
    pthread_create(&th[0], NULL, blk_read, NULL);
    pthread_create(&th[1], NULL, blk_futex, NULL);
    pthread_create(&th[2], NULL, blk_epoll, NULL);
    pthread_create(&th[3], NULL, blk_sleep, NULL);
    pthread_create(&th[4], NULL, blk_sigwait, NULL);
    pthread_create(&th[5], NULL, blk_recv, NULL);
    blk_sigwait_th = th[4];
    wait_stop();
    if (write(pipefd[1], "hello", 5) != 5) return 1;
    atomic_store((_Atomic uint32_t *)&futex_word, 1);
    syscall(SYS_futex, &futex_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    uint64_t one = 1;
    if (write(efd, &one, 8) != 8) return 1;
    pthread_kill(blk_sigwait_th, SIGUSR2);
    if (write(sockfd[1], "howdy", 5) != 5) return 1;
    for (int i = 0; i < 6; i++) pthread_join(th[i], NULL);
    result(blk.read_ret == 5, "read returned the data (ret %ld errno %d)", blk.read_ret, blk.read_err);
    result(blk.futex_ret == 0, "futex wait returned 0 (ret %ld errno %d)", blk.futex_ret, blk.futex_err);
    result(blk.epoll_ret == 1, "epoll_wait returned the event (ret %ld errno %d)", blk.epoll_ret, blk.epoll_err);
    result(blk.sigwait_ret == SIGUSR2, "sigtimedwait returned the signal (ret %ld errno %d)", blk.sigwait_ret,
           blk.sigwait_err);
    result(blk.recv_ret == 5, "recv returned the data (ret %ld errno %d)", blk.recv_ret, blk.recv_err);
    result(blk.sleep_ret == 0 && blk.slept >= 1.999, "nanosleep slept its full 2 s (ret %ld errno %d, %.3f s)",
           blk.sleep_ret, blk.sleep_err, blk.slept);
    return 0;
}

/* ------------------------------------------------------------- handlers */
static volatile sig_atomic_t segv_count, trap_count;
static char *guard;
static long pagesz;
static void on_segv(int s, siginfo_t *si, void *u)
{
    (void)s; (void)u;
    if ((char *)si->si_addr >= guard && (char *)si->si_addr < guard + pagesz) {
        segv_count++;
        mprotect(guard, (size_t)pagesz, PROT_READ | PROT_WRITE);
    } else {
        _exit(99);
    }
}
static void on_trap(int s) { (void)s; trap_count++; }

static int mode_handlers(void)
{
    struct sigaction sa = { 0 };
    pagesz = sysconf(_SC_PAGESIZE);
    guard = mmap(NULL, (size_t)pagesz, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    struct sigaction st = { 0 };
    st.sa_handler = on_trap;
    sigaction(SIGTRAP, &st, NULL);
    note_tid("main");
    long ops = 0, bad = 0;
    churn_thread_work(3, &ops, &bad);
    guard[0] = 1;                       /* SIGSEGV: our handler unprotects */
    raise(SIGTRAP);
    __asm__ volatile("int3");
    result(segv_count == 1, "own SIGSEGV handler ran once (%d)", (int)segv_count);
    result(trap_count == 2, "own SIGTRAP handler ran twice (%d)", (int)trap_count);
    return 0;
}

/* ----------------------------------------------------------- mallocinfo */
static void *mi_thread(void *a)
{
    (void)a;
    note_tid("mallocinfo");
    int p[2];
    if (pipe(p)) return NULL;
    fcntl(p[1], F_SETPIPE_SZ, 4096);
    FILE *f = fdopen(p[1], "w");
    setvbuf(f, NULL, _IONBF, 0);
    static int rfd;
    rfd = p[0];
    /* Nobody reads until STOP: malloc_info blocks in write(). */
    pthread_t reader;
    extern void *mi_reader(void *);
    pthread_create(&reader, NULL, mi_reader, &rfd);
    for (int i = 0; i < 50; i++) malloc_info(0, f);
    fclose(f);
    pthread_join(reader, NULL);
    return NULL;
}
void *mi_reader(void *a)
{
    int fd = *(int *)a;
    char buf[65536];
    wait_stop();
    while (read(fd, buf, sizeof buf) > 0) {}
    return NULL;
}
static int mode_mallocinfo(int n)
{
    pthread_t mi, th[64];
    churn_arg args[64];
    node *list = build_list(1000);
    uint64_t s0 = list_sum(list);
    for (int i = 0; i < n && i < 64; i++) { args[i] = (churn_arg){ i, 0, 0 }; pthread_create(&th[i], NULL, churn_main, &args[i]); }
    pthread_create(&mi, NULL, mi_thread, NULL);
    note_tid("main");
    wait_stop();
    pthread_join(mi, NULL);
    long bad = 0;
    for (int i = 0; i < n && i < 64; i++) { pthread_join(th[i], NULL); bad += args[i].bad; }
    result(bad == 0 && list_sum(list) == s0, "mallocinfo target still consistent");
    return 0;
}

/* ------------------------------------------------------------ bigmalloc */
static void *big_main(void *a)
{
    churn_arg *c = a;
    char name[32];
    snprintf(name, sizeof name, "big%d", c->id);
    note_tid(name);
    while (!should_stop()) {
        size_t n = (size_t)(1 << 20) + (size_t)c->id * 4096;
        char *p = malloc(n);        /* mmap'ed: long enough inside malloc to be caught there */
        p[0] = 1; p[n - 1] = 2;
        if (p[0] != 1 || p[n - 1] != 2) c->bad++;
        free(p);
        c->ops++;
    }
    return NULL;
}
static int mode_bigmalloc(int n)
{
    pthread_t th[64];
    churn_arg args[64];
    for (int i = 0; i < n && i < 64; i++) { args[i] = (churn_arg){ i, 0, 0 }; pthread_create(&th[i], NULL, big_main, &args[i]); }
    note_tid("main");
    wait_stop();
    long bad = 0, ops = 0;
    for (int i = 0; i < n && i < 64; i++) { pthread_join(th[i], NULL); bad += args[i].bad; ops += args[i].ops; }
    result(bad == 0 && ops > 0, "bigmalloc (%ld ops)", ops);
    return 0;
}

/* --------------------------------------------------------------- dlopen */
static const char *dl_lib;
static long dl_count;
static long dl_pause_ns;             /* between loads: a window with the loader free */
static void *dl_main(void *a)
{
    (void)a;
    note_tid("dlopen");
    while (!should_stop()) {
        void *h = dlopen(dl_lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); dl_count = -1000000; return NULL; }
        dlclose(h);
        dl_count++;
        if (dl_pause_ns) { struct timespec d = { 0, dl_pause_ns }; nanosleep(&d, NULL); }
    }
    return NULL;
}
static int mode_dlopen(const char *lib)
{
    pthread_t th;
    dl_lib = lib;
    note_tid("main");
    pthread_create(&th, NULL, dl_main, NULL);
    long ops = 0, bad = 0;
    churn_thread_work(5, &ops, &bad);
    pthread_join(th, NULL);
    result(dl_count > 0 && bad == 0, "dlopen loop (%ld loads)", dl_count);
    return 0;
}

/* -------------------------------------------------------------- seccomp */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
static int mode_seccomp(int strict)
{
    note_tid("main");
    if (strict == 1) {
        int p[2];
        char c;
        if (pipe(p)) return 1;
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT);
        if (read(p[0], &c, 1)) {}
        syscall(SYS_exit, 0);
    }
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_filter noclone[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),                       /* seccomp_data.nr */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 435 /* clone3 */, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    };
    struct sock_fprog prog = { 1, &allow };
    if (strict == 2) prog = (struct sock_fprog){ sizeof noclone / sizeof *noclone, noclone };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) return 1;
    return mode_single();
}

/* ----------------------------------------------------------------- idle */
static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static int idle_go;
static void *idle_main(void *a)
{
    (void)a;
    note_tid("idle");
    pthread_mutex_lock(&idle_mu);
    while (!idle_go) pthread_cond_wait(&idle_cv, &idle_mu);
    pthread_mutex_unlock(&idle_mu);
    return NULL;
}
static int mode_idle(int n)
{
    pthread_t th[256];
    if (n > 256) n = 256;
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, idle_main, NULL);
    wait_stop();
    pthread_mutex_lock(&idle_mu);
    idle_go = 1;
    pthread_cond_broadcast(&idle_cv);
    pthread_mutex_unlock(&idle_mu);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    result(1, "idle (%d threads)", n);
    return 0;
}

/* ----------------------------------------------------------------- fork */
#include <sys/wait.h>
static int mode_fork(void)
{
    char trigger[4200];
    snprintf(trigger, sizeof trigger, "%s.fork", stop_file);
    note_tid("main");
    node *list = build_list(1000);
    uint64_t s0 = list_sum(list);
    long ops = 0, bad = 0;
    pid_t child = -1;
    uint64_t x = 1;
    struct stat st;
    while (!should_stop()) {
        if (child < 0 && stat(trigger, &st) == 0) {
            fflush(stdout);
            child = fork();
            if (child == 0) { note_tid("child"); child = 0; }
        }
        for (int k = 0; k < 1000; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            char *p = malloc(16 + x % 2000);
            p[0] = (char)k;
            if (p[0] != (char)k) bad++;
            free(p);
            ops++;
        }
    }
    if (child == 0) _exit(bad == 0 && list_sum(list) == s0 ? 0 : 1);
    int status = -1;
    if (child > 0) waitpid(child, &status, 0);
    result(child > 0, "forked");
    result(child > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child ran on correctly (status %d)", status);
    result(bad == 0 && list_sum(list) == s0, "parent ran on correctly (%ld ops)", ops);
    return 0;
}

/* ------------------------------------------------------------- ctorwait */
/* Read by the constructor of attach_ctorwait.c (the executable is linked
 * with -rdynamic): it waits for the main thread to move this on. */
atomic_long mlzt_main_ticks;
static int mode_ctorwait(const char *lib)
{
    pthread_t th;
    dl_lib = lib;
    dl_pause_ns = 10000000;
    note_tid("main");
    pthread_create(&th, NULL, dl_main, NULL);
    long ops = 0, bad = 0;
    while (!should_stop()) {
        struct timespec d = { 0, 1000000 };
        nanosleep(&d, NULL);
        atomic_fetch_add(&mlzt_main_ticks, 1);
        char *p = malloc(64);
        p[0] = 1;
        if (p[0] != 1) bad++;
        free(p);
        ops++;
    }
    /* Keep ticking until the loader thread is out of the constructor. */
    while (pthread_tryjoin_np(th, NULL) == EBUSY) {
        struct timespec d = { 0, 1000000 };
        nanosleep(&d, NULL);
        atomic_fetch_add(&mlzt_main_ticks, 1);
    }
    result(dl_count > 0 && bad == 0, "ctorwait: main ticked %ld times, %ld loads", ops, dl_count);
    return 0;
}

/* -------------------------------------------------------------- threads */
static void *request_main(void *a)
{
    long *bad = a;
    void *p[64];
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < 64; i++) { p[i] = malloc(16 + (size_t)i * 24); memset(p[i], i, 16); }
        for (int i = 0; i < 64; i++) { if (((unsigned char *)p[i])[7] != i) (*bad)++; free(p[i]); }
    }
    return NULL;
}
static int mode_threads(void)
{
    note_tid("main");
    long made = 0, bad = 0;
    while (!should_stop()) {
        pthread_t th[4];
        for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, request_main, &bad);
        for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
        made += 4;
        /* The made count is visible from outside: it must keep rising. */
        if (made % 400 == 0) { fprintf(tids, "made %ld\n", made); fflush(tids); }
    }
    result(made > 0 && bad == 0, "threads: %ld made and joined, %ld bad", made, bad);
    return 0;
}

/* ------------------------------------------------------------ inhandler */
static volatile sig_atomic_t handler_done;
static long handler_rounds;
static void usr1_handler(int sig)
{
    (void)sig;
    while (!atomic_load(&stopping)) {
        struct timespec d = { 0, 2000000 };
        nanosleep(&d, NULL);
        handler_rounds++;
    }
    handler_done = 1;
}
static void *inhandler_main(void *a)
{
    (void)a;
    note_tid("handler");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = usr1_handler;
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    return NULL;
}
static int mode_inhandler(void)
{
    pthread_t th;
    note_tid("main");
    pthread_create(&th, NULL, inhandler_main, NULL);
    wait_stop();
    pthread_join(th, NULL);
    result(handler_done && handler_rounds > 0, "inhandler: the handler returned (%ld rounds)", handler_rounds);
    return 0;
}

/* ---------------------------------------------------------------- vfork */
static char vfork_trigger[4200];
static void *vfork_main(void *a)
{
    (void)a;
    note_tid("vforker");
    /* Prepared before vfork: the child may only make raw syscalls. */
    char *const argv[] = { "/bin/true", NULL };
    struct stat st;
    pid_t c = vfork();
    if (c == 0) {
        char msg[32];
        int n = snprintf(msg, sizeof msg, "vchild %d\n", (int)syscall(SYS_getpid));
        syscall(SYS_write, fileno(tids), msg, n);
        while (syscall(SYS_stat, vfork_trigger, &st) != 0) {
            struct timespec d = { 0, 5000000 };
            syscall(SYS_nanosleep, &d, NULL);
        }
        syscall(SYS_execve, argv[0], argv, environ);
        syscall(SYS_exit, 127);
    }
    int status;
    waitpid(c, &status, 0);
    result(WIFEXITED(status) && WEXITSTATUS(status) == 0, "vfork child exec'd /bin/true");
    return NULL;
}
static int mode_vfork(void)
{
    pthread_t th;
    snprintf(vfork_trigger, sizeof vfork_trigger, "%s.exec", stop_file);
    note_tid("main");
    fflush(tids);
    pthread_create(&th, NULL, vfork_main, NULL);
    long ops = 0, bad = 0;
    churn_thread_work(7, &ops, &bad);
    pthread_join(th, NULL);
    result(bad == 0, "vfork: main churned (%ld ops)", ops);
    return 0;
}

/* ---------------------------------------------------------------- forks */
static int mode_forks(void)
{
    note_tid("main");
    long forks = 0, badexit = 0;
    while (!should_stop()) {
        pid_t c = fork();
        if (c == 0) { char *p = malloc(100); p[0] = 1; _exit(p[0] == 1 ? 0 : 1); }
        int status;
        if (c < 0 || waitpid(c, &status, 0) != c || !WIFEXITED(status) || WEXITSTATUS(status)) badexit++;
        forks++;
        if (forks % 100 == 0) { fprintf(tids, "forks %ld\n", forks); fflush(tids); }
        struct timespec d = { 0, 2000000 };
        nanosleep(&d, NULL);
    }
    result(forks > 0 && badexit == 0, "forks: %ld children, %ld bad", forks, badexit);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) { fprintf(stderr, "usage: attach_target MODE STOP TIDS [N|LIB]\n"); return 2; }
    stop_file = argv[2];
    tids = fopen(argv[3], "w");
    if (!tids) return 2;
    const char *m = argv[1];
    int n = argc > 4 ? atoi(argv[4]) : 4;
    int rc = 2;
    if (!strcmp(m, "single")) rc = mode_single();
    else if (!strcmp(m, "churn")) rc = mode_churn(n);
    else if (!strcmp(m, "block")) rc = mode_block();
    else if (!strcmp(m, "handlers")) rc = mode_handlers();
    else if (!strcmp(m, "mallocinfo")) rc = mode_mallocinfo(n);
    else if (!strcmp(m, "bigmalloc")) rc = mode_bigmalloc(n);
    else if (!strcmp(m, "dlopen") && argc > 4) rc = mode_dlopen(argv[4]);
    else if (!strcmp(m, "fork")) rc = mode_fork();
    else if (!strcmp(m, "ctorwait") && argc > 4) rc = mode_ctorwait(argv[4]);
    else if (!strcmp(m, "threads")) rc = mode_threads();
    else if (!strcmp(m, "forks")) rc = mode_forks();
    else if (!strcmp(m, "vfork")) rc = mode_vfork();
    else if (!strcmp(m, "inhandler")) rc = mode_inhandler();
    else if (!strcmp(m, "idle")) rc = mode_idle(n);
    else if (!strcmp(m, "seccomp")) rc = mode_seccomp(0);
    else if (!strcmp(m, "strict")) rc = mode_seccomp(1);
    else if (!strcmp(m, "noclone")) rc = mode_seccomp(2);
    if (rc) return rc;
    printf("%s\n", failures ? "target: FAILED" : "target: all ok");
    return failures ? 1 : 0;
}
