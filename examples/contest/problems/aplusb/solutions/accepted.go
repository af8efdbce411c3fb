package main

import (
	"bufio"
	"os"
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
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for t := next(); t > 0; t-- {
		a, b := next(), next()
		out.WriteString(strconv.FormatInt(a+b, 10))
		out.WriteByte('\n')
	}
}
