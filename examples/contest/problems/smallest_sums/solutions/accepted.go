package main

import (
	"bufio"
	"os"
	"sort"
	"strconv"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	in.Split(bufio.ScanWords)
	next := func() int64 {
		in.Scan()
		v, _ := strconv.ParseInt(in.Text(), 10, 64)
		return v
	}
	n := int(next())
	a := make([]int64, n)
	for i := range a {
		a[i] = next()
	}
	sort.Slice(a, func(i, j int) bool { return a[i] < a[j] })
	prefix := make([]int64, n+1)
	for i, x := range a {
		prefix[i+1] = prefix[i] + x
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for q := next(); q > 0; q-- {
		out.WriteString(strconv.FormatInt(prefix[next()], 10))
		out.WriteByte('\n')
	}
}
