// Recursion 2*10^5 deep: needs a stack larger than the usual 8 MB default.
#include <bits/stdc++.h>
using namespace std;

vector<vector<int>> children;
int best = 0;

int height(int v) {
    int top = 0, second = 0;
    for (int c : children[v]) {
        int h = height(c) + 1;
        if (h > top) {
            second = top;
            top = h;
        } else if (h > second) {
            second = h;
        }
    }
    best = max(best, top + second);
    return top;
}

int main() {
    ios::sync_with_stdio(false);
    cin.tie(nullptr);
    int n;
    cin >> n;
    children.assign(n + 1, {});
    for (int i = 1; i <= n; i++) {
        int p;
        cin >> p;
        children[p].push_back(i);
    }
    height(children[0][0]);
    cout << best << '\n';
}
