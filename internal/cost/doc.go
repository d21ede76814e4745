// Package cost owns what generations cost: the usage vocabulary (Usage,
// its Basis, what a key's generations Billed and what the requests served
// without a generation Saved, by kind) and the rule that adds them up; the
// price table (what a generation of a model costs, per million input and
// output tokens or per call, read from a JSON file); and the cost guard,
// which narrows upstream retries when spend runs high.
//
// It decides nothing about requests and does no I/O beyond Load reading
// its file: the records that keep what a key billed are resume's, the
// series that count it metrics'.
package cost
