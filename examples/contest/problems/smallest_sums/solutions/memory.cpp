// A count for every possible value sum up to 10^9: 4 GB of ints, touched.
#include <bits/stdc++.h>
using namespace std;

int main() {
    int n;
    cin >> n;
    vector<int> count(1000000000, 0);
    for (int i = 0; i < n; i++) {
        int x;
        cin >> x;
        count[x]++;
    }
    long long total = 0;
    for (int v : count) total += v;
    cout << total << '\n';
}
