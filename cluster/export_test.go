package cluster

// WithEtcdFastPasswords runs the embedded etcd with bcrypt's lowest cost
// (4), for the tests in package cluster_test that make etcd users.
var WithEtcdFastPasswords = withBcryptCost(4)
