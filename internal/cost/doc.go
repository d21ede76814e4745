// Package cost owns the price table: what a generation of a model costs,
// per million input and output tokens or per call, read from a JSON file.
//
// It computes prices and nothing else: it keeps no spend, decides nothing
// about requests, and does no I/O beyond Load reading its file.
package cost
