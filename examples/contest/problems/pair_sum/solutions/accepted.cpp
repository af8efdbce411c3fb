// Two pointers over the sorted values: often a different pair than the reference's.
#include <bits/stdc++.h>
using namespace std;

int main() {
    ios::sync_with_stdio(false);
    cin.tie(nullptr);
    int n;
    long long x;
    cin >> n >> x;
    vector<pair<long long, int>> a(n);
    for (int i = 0; i < n; i++) {
        cin >> a[i].first;
        a[i].second = i + 1;
    }
    sort(a.begin(), a.end());
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        long long s = a[lo].first + a[hi].first;
        if (s == x) {
            cout << a[hi].second << ' ' << a[lo].second << '\n';
            return 0;
        }
        if (s < x) lo++;
        else hi--;
    }
    cout << -1 << '\n';
}
