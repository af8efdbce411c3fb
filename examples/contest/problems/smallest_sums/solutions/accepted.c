#include <stdio.h>
#include <stdlib.h>

static int cmp(const void* x, const void* y) {
    long long a = *(const long long*)x, b = *(const long long*)y;
    return (a > b) - (a < b);
}

int main(void) {
    int n, q;
    if (scanf("%d", &n) != 1) return 1;
    long long* a = malloc(sizeof *a * n);
    long long* prefix = malloc(sizeof *prefix * (n + 1));
    for (int i = 0; i < n; i++)
        if (scanf("%lld", &a[i]) != 1) return 1;
    qsort(a, n, sizeof *a, cmp);
    prefix[0] = 0;
    for (int i = 0; i < n; i++) prefix[i + 1] = prefix[i] + a[i];
    if (scanf("%d", &q) != 1) return 1;
    while (q--) {
        int k;
        if (scanf("%d", &k) != 1) return 1;
        printf("%lld\n", prefix[k]);
    }
    free(a);
    free(prefix);
    return 0;
}
