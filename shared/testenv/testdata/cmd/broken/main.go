// Command broken does not compile, on purpose: testenv's build tests check the failure.
package main

func main() { undefinedOnPurpose() }
