// Command hello is the smallest binary internal/dist's tests package.
package main

import (
	"fmt"
	"os"

	"github.com/gpushare/nomad-gpushare/internal/version"
)

func main() {
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.String("hello"))
	}
}
