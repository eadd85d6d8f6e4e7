#include <stdio.h>

#define LIMIT 2

int counter;
int grown[4] = {1, 2, 3, 4};
static const char *names[] = {"alpha", "beta"};

__attribute__((noinline)) int grows(int x)
{
	if (x > 100)
		printf("big %d\n", x + grown[x & 3]);
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

int main(int argc, char **argv)
{
	return unchanged(argc) + uses_limit(argc) + dispatch(argc);
}
