// Prints YES/NO in capitals: the checker ignores case.
#include <bits/stdc++.h>
using namespace std;

int main() {
    ios::sync_with_stdio(false);
    cin.tie(nullptr);
    int t;
    cin >> t;
    string w;
    while (t--) {
        cin >> w;
        cout << (equal(w.begin(), w.end(), w.rbegin()) ? "YES" : "NO") << '\n';
    }
}
