// Command hello is a main package for testenv's build tests.
package main

import "fmt"

func main() { fmt.Println("hello") }
