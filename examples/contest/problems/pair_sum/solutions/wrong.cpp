// Looks up X - a_i after storing a_i: pairs an element with itself when 2 a_i = X.
#include <bits/stdc++.h>
using namespace std;

int main() {
    ios::sync_with_stdio(false);
    cin.tie(nullptr);
    int n;
    long long x;
    cin >> n >> x;
    unordered_map<long long, int> seen;
    for (int i = 1; i <= n; i++) {
        long long a;
        cin >> a;
        seen[a] = i;
        auto it = seen.find(x - a);
        if (it != seen.end()) {
            cout << it->second << ' ' << i << '\n';
            return 0;
        }
    }
    cout << -1 << '\n';
}
