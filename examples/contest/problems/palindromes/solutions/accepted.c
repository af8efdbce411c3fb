/* Prints yes/no in lower case: the checker ignores case. */
#include <stdio.h>
#include <string.h>

static char word[1000001];

int main(void) {
    int t;
    if (scanf("%d", &t) != 1) return 1;
    while (t--) {
        if (scanf("%1000000s", word) != 1) return 1;
        size_t n = strlen(word);
        int same = 1;
        for (size_t i = 0; i < n / 2; i++) same &= word[i] == word[n - 1 - i];
        puts(same ? "yes" : "no");
    }
    return 0;
}
