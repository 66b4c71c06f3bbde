// etcd for the real-cluster tests: the etcd server's own entry point, from the version
// Kubernetes v1.37 is tested with (go.etcd.io/etcd/server/v3, see go.mod).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
