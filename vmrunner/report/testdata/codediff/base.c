#include <stdio.h>

#define LIMIT 3

int counter;
static const char *names[] = {"alpha", "beta"};

__attribute__((noinline)) int grows(int x)
{
	return x + 1;
}

__attribute__((noinline)) int uses_limit(int x)
{
	return x % LIMIT ? x * LIMIT : x;
}

__attribute__((noinline)) int unchanged(int x)
{
	counter += x;
	printf("unchanged %d\n", x);
	return grows(x) + puts(names[x & 1]);
}

__attribute__((noinline)) int dispatch(int x)
{
	switch (x) {
	case 0: return grows(1);
	case 1: return unchanged(2);
	case 2: return counter;
	case 3: return uses_limit(x);
	case 4: return 7;
	case 5: return puts("five");
	default: return 0;
	}
}

/* a function with no caller, which the series removes */
int only_in_base(int x)
{
	return x * 7 + 1;
}

int main(int argc, char **argv)
{
	return unchanged(argc) + uses_limit(argc) + dispatch(argc);
}
