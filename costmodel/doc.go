// Package costmodel prices requests in calibrated seconds: an output-length
// predictor, the marginal-cost scorer of "Calibrate, Then Route" (each
// candidate is priced by the completion time the request would add there),
// and an in-process latency predictor fitted online from observed responses.
package costmodel
