// lockloop: the panel harness's lock workload (scripts/panel-harness-suites.sh).
//
//   lockloop posix|flock N MS
//
// N processes, each with its own open file description of one file, take
// and drop an exclusive lock on the whole file in a loop (fcntl F_SETLKW
// F_WRLCK then F_UNLCK, or flock LOCK_EX then LOCK_UN) for MS milliseconds,
// started together; prints "acquisitions=TOTAL per_s=RATE". The parent
// stops them with a flag in shared memory, so the loop makes no system
// call but the two of the lock. Built static: gcc -O2 -static.
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *path = "/tmp/lockloop.lock";

static void die(const char *what)
{
	perror(what);
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: lockloop posix|flock N MS\n");
		return 2;
	}
	int posix = strcmp(argv[1], "posix") == 0;
	if (!posix && strcmp(argv[1], "flock") != 0) {
		fprintf(stderr, "lockloop: kind %s: want posix or flock\n", argv[1]);
		return 2;
	}
	int n = atoi(argv[2]), ms = atoi(argv[3]);
	if (n < 1 || ms < 1)
		return 2;
	int fd = open(path, O_RDWR | O_CREAT, 0644);
	if (fd < 0)
		die("open");
	close(fd);
	// counts[0..n-1], then the stop flag
	volatile uint64_t *shared = mmap(NULL, (n + 1) * sizeof(uint64_t), PROT_READ | PROT_WRITE,
					 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED)
		die("mmap");
	volatile uint64_t *stop = &shared[n];
	int start[2], ready[2];
	if (pipe(start) || pipe(ready))
		die("pipe");
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid < 0)
			die("fork");
		if (pid > 0)
			continue;
		close(start[1]);
		close(ready[0]);
		int f = open(path, O_RDWR); // an open file description of its own
		if (f < 0)
			die("open");
		char c = 1;
		if (write(ready[1], &c, 1) != 1)
			die("ready");
		while (read(start[0], &c, 1) > 0) // returns 0 when the parent closes it
			;
		struct flock wr = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
		struct flock un = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
		uint64_t k = 0;
		while (!*stop) {
			if (posix ? fcntl(f, F_SETLKW, &wr) : flock(f, LOCK_EX))
				die("lock");
			if (posix ? fcntl(f, F_SETLK, &un) : flock(f, LOCK_UN))
				die("unlock");
			k++;
		}
		shared[i] = k;
		_exit(0);
	}
	close(start[0]);
	close(ready[1]);
	for (int i = 0; i < n; i++) {
		char c;
		if (read(ready[0], &c, 1) != 1)
			die("waiting for the contenders");
	}
	struct timespec t0, t1, d = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	close(start[1]); // every contender starts now
	nanosleep(&d, NULL);
	*stop = 1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	for (int i = 0; i < n; i++) {
		int st;
		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "lockloop: a contender failed\n");
			return 1;
		}
	}
	uint64_t total = 0;
	for (int i = 0; i < n; i++)
		total += shared[i];
	double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("acquisitions=%llu per_s=%.0f\n", (unsigned long long)total, total / secs);
	return 0;
}
