// Prints yes/no in lower case: the checker ignores case.
package main

import (
	"bufio"
	"os"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<21), 1<<21)
	in.Split(bufio.ScanWords)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	in.Scan()
	for in.Scan() {
		w := in.Bytes()
		same := true
		for i, j := 0, len(w)-1; i < j; i, j = i+1, j-1 {
			same = same && w[i] == w[j]
		}
		if same {
			out.WriteString("yes\n")
		} else {
			out.WriteString("no\n")
		}
	}
}
