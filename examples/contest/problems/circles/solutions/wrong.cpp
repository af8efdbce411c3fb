// pi as 3.14: off by 0.05% on every answer.
#include <bits/stdc++.h>
using namespace std;

int main() {
    int n;
    scanf("%d", &n);
    double total = 0;
    for (int i = 0; i < n; i++) {
        double r;
        scanf("%lf", &r);
        total += 3.14 * r * r;
    }
    printf("%.9f %.9f\n", total, total / n);
}
