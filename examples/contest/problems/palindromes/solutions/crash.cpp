// Off by one: s.at(n) throws std::out_of_range, and the program aborts.
#include <bits/stdc++.h>
using namespace std;

int main() {
    int t;
    cin >> t;
    string w;
    while (t--) {
        cin >> w;
        size_t n = w.size();
        bool same = true;
        for (size_t i = 0; i <= n / 2; i++) same = same && w.at(i) == w.at(n - i);
        cout << (same ? "Yes" : "No") << '\n';
    }
}
