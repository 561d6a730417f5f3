// Package kubernetes discovers the picker's endpoints from a Kubernetes
// cluster: the Pods selected by a Gateway API Inference Extension
// InferencePool (inference.networking.k8s.io/v1), or, without the CRD, the
// Pods matching a label selector on fixed target ports.
//
// It uses a controller-runtime cache restricted to one namespace and sends
// the complete endpoint set to a discovery.Sink after every change, so a
// selector or port change is a full resync and a departed pod drops out
// (with its in-flight and index state, which the discovery.Store's
// listeners release). With leader election on, only the leader delivers
// endpoints, so only the leader becomes ready.
package kubernetes
