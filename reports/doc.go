// Package reports writes what package judge decided: the
// kernel-test-robot style table, the verdict's paragraph and the lines
// around it, the reply mail, the dashboard's cells (Row.Cells, Legend),
// the panel's table, and the run directory kept for every run (Run, its
// record of what the stages found, LoadRun, SaveRun). It judges nothing:
// every number it prints comes from judge.Compare, so that a change to the
// statistics never touches the prose.
package reports
