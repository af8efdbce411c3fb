// Judges pair_sum, where any pair summing to X is right.
// Usage: checker <input> <contestant_output> <answer>. Exit status: 0 accepted, 1 wrong answer,
// 2 presentation error, 3 checker failure (the jury's answer is wrong); the reason on stderr.
#include <bits/stdc++.h>
using namespace std;

[[noreturn]] void verdict(int status, const string& reason) {
    cerr << reason << '\n';
    exit(status);
}

vector<string> tokens(const char* path) {
    ifstream in(path);
    if (!in) verdict(3, string("cannot open ") + path);
    vector<string> found;
    string token;
    while (in >> token) found.push_back(token);
    return found;
}

// A token as an integer when it is one (an optional minus, 1 to 18 digits), else nothing.
optional<long long> integer(const string& token) {
    size_t start = token.size() > 0 && token[0] == '-' ? 1 : 0;
    size_t digits = token.size() - start;
    if (digits == 0 || digits > 18) return nullopt;
    for (size_t i = start; i < token.size(); i++)
        if (!isdigit(static_cast<unsigned char>(token[i]))) return nullopt;
    return stoll(token);
}

int main(int argc, char** argv) {
    if (argc != 4) verdict(3, "usage: checker <input> <contestant_output> <answer>");
    ifstream input(argv[1]);
    long long n, x;
    if (!(input >> n >> x) || n < 2) verdict(3, "unreadable input");
    vector<long long> a(n + 1);
    for (long long i = 1; i <= n; i++)
        if (!(input >> a[i])) verdict(3, "unreadable input");
    vector<string> answer = tokens(argv[3]);
    if (answer.empty()) verdict(3, "empty answer file");
    bool jury_has_pair = answer[0] != "-1";

    vector<string> output = tokens(argv[2]);
    vector<long long> numbers;
    for (const string& token : output) {
        optional<long long> value = integer(token);
        if (!value) verdict(2, "not an integer: " + token.substr(0, 40));
        numbers.push_back(*value);
    }
    if (numbers.size() == 1 && numbers[0] == -1) {
        if (jury_has_pair) verdict(1, "printed -1, but a pair exists");
        verdict(0, "no pair, rightly");
    }
    if (numbers.size() != 2) verdict(2, "expected two indices or -1");
    long long i = numbers[0], j = numbers[1];
    if (i < 1 || i > n || j < 1 || j > n) verdict(1, "an index out of range");
    if (i == j) verdict(1, "the same index twice");
    if (a[i] + a[j] != x) verdict(1, "a_i + a_j is not X");
    if (!jury_has_pair) verdict(3, "a valid pair, where the jury found none");
    verdict(0, "a valid pair");
}
