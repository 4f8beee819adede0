// gowrite writes a file in its working directory: Go makes its system
// calls itself (no libc), so only the node's file view decides where it lands.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gowrite FILE")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], []byte("go ok\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("wrote")
}
