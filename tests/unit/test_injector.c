/*
 * test_injector.c - the injector's reads of target memory (injector/ptrace.c)
 * on this process's own /proc/PID/mem: a read that fails records the first
 * error, naming the address; a probe (mlz__mem_peek) that fails records
 * nothing, so a later step's error is the one printed.
 */
#include "../check.h"
#include "../../injector/injector.h"

#include <sys/mman.h>
#include <unistd.h>

static uint64_t unmapped_page(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    munmap(p, 4096);
    return (uint64_t)(uintptr_t)p;
}

static void test_read_and_peek_mapped(void)
{
    static const char text[] = "memlyze";
    char a[8] = "", b[8] = "";
    mlz__err_clear();
    REQUIRE(mlz__mem_open(getpid()) == 0);
    CHECK(mlz__mem_read((uint64_t)(uintptr_t)text, a, sizeof a) == 0);
    CHECK(mlz__mem_peek((uint64_t)(uintptr_t)text, b, sizeof b) == 0);
    CHECK(!memcmp(a, text, sizeof a) && !memcmp(b, text, sizeof b));
    CHECK(mlz__errmsg()[0] == 0);
    mlz__mem_close();
}

static void test_failed_peek_records_nothing(void)
{
    uint64_t gone = unmapped_page();
    REQUIRE(gone != 0);
    char buf[8];
    mlz__err_clear();
    REQUIRE(mlz__mem_open(getpid()) == 0);
    CHECK(mlz__mem_peek(gone, buf, sizeof buf) != 0);
    CHECK(mlz__errmsg()[0] == 0);
    /* The step that fails next is the one the user reads about. */
    mlz__err("the next step's own error");
    CHECK(strcmp(mlz__errmsg(), "the next step's own error") == 0);
    mlz__err_clear();
    mlz__mem_close();
}

static void test_failed_read_names_the_address(void)
{
    uint64_t gone = unmapped_page();
    REQUIRE(gone != 0);
    char buf[8], want[64];
    mlz__err_clear();
    REQUIRE(mlz__mem_open(getpid()) == 0);
    CHECK(mlz__mem_read(gone, buf, sizeof buf) == MLZ_INJ_EIO);
    snprintf(want, sizeof want, "cannot read target memory at 0x%llx", (unsigned long long)gone);
    CHECK(strncmp(mlz__errmsg(), want, strlen(want)) == 0);
    mlz__err("a later error");   /* the first one stays */
    CHECK(strncmp(mlz__errmsg(), want, strlen(want)) == 0);
    mlz__err_clear();
    mlz__mem_close();
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_read_and_peek_mapped);
    RUN(test_failed_peek_records_nothing);
    RUN(test_failed_read_names_the_address);
    CHECK_EXIT();
}
