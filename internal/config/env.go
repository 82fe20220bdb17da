// Package config loads each process's configuration from the environment,
// applies defaults and validates every value before anything starts. Errors
// name the variable and what it expected, one line each.
//
// Every variable is a row of one table (Var): its name, default, meaning,
// the processes that read it and the parser that fills a field of their
// configuration. A process reads its rows and no others; docs/configuration.md
// and each command's -help are written from the same rows.
package config

import (
	"errors"
	"fmt"
	"strings"
)

// Process is a command that reads variables of the table.
type Process string

// The processes that read variables. cmd/loadgen reads flags only.
const (
	LimiterProcess  Process = "limiter"
	DetectorProcess Process = "detector"
	ArchiverProcess Process = "archiver"
	NotifierProcess Process = "notifier"
	DevKafkaProcess Process = "devkafka"
	ConsoleProcess  Process = "console"
)

// Processes lists the processes in the order of the documentation.
var Processes = []Process{LimiterProcess, DetectorProcess, ArchiverProcess, NotifierProcess, ConsoleProcess, DevKafkaProcess}

// Var is one row of the table: an environment variable as the processes in
// Readers read it. A variable whose default or meaning differs between
// processes (LISTEN_ADDR) has a row per group of processes.
type Var struct {
	// Name is the environment variable.
	Name string
	// Flag, when set, is the command-line flag that mirrors the variable
	// and wins over it (devkafka's rows only).
	Flag string
	// Default is the value an unset or blank variable takes, as text: it
	// goes through the row's parser like any value. "" is empty.
	Default string
	// DefaultDoc, when set, replaces Default in the documentation: a
	// default computed at start (INSTANCE_ID: the host name), or one the
	// Go runtime has.
	DefaultDoc string
	// Meaning says what the variable does, in Markdown: one line or a
	// short paragraph.
	Meaning string
	// Readers are the processes that read the variable.
	Readers []Process
	// Runtime marks a variable read by the Go runtime: documented here,
	// parsed by nothing in this package.
	Runtime bool

	defaultFunc func(Process) string // computes the default when Default is ""
	load        func(*env, *Var, *dest)
}

// ReadBy reports whether process p reads v.
func (v *Var) ReadBy(p Process) bool {
	for _, r := range v.Readers {
		if r == p {
			return true
		}
	}
	return false
}

// Vars returns the rows process p reads, in the table's order.
func Vars(p Process) []Var {
	var out []Var
	for _, v := range table {
		if v.ReadBy(p) {
			out = append(out, v)
		}
	}
	return out
}

// VarNames returns the names of the variables process p reads, in the
// table's order.
func VarNames(p Process) []string {
	var out []string
	for _, v := range Vars(p) {
		out = append(out, v.Name)
	}
	return out
}

// Lookup returns the row of name that process p reads.
func Lookup(p Process, name string) (Var, bool) {
	for _, v := range Vars(p) {
		if v.Name == name {
			return v, true
		}
	}
	return Var{}, false
}

// dest is what a process's rows fill: its configuration struct, and its
// Common part for the rows the services share. Only the process's own
// pointers are set, so a row bound to another process's field finds nil.
type dest struct {
	common   *Common
	limiter  *Limiter
	detector *Detector
	archiver *Archiver
	notifier *Notifier
	devKafka *DevKafka
	console  *Console
}

// field locates a row's field in a process's configuration; nil when the
// process has no such field.
type field[T any] func(*dest) *T

func inCommon[T any](f func(*Common) *T) field[T] {
	return func(d *dest) *T { return via(d.common, f) }
}

func inLimiter[T any](f func(*Limiter) *T) field[T] {
	return func(d *dest) *T { return via(d.limiter, f) }
}

func inDetector[T any](f func(*Detector) *T) field[T] {
	return func(d *dest) *T { return via(d.detector, f) }
}

func inArchiver[T any](f func(*Archiver) *T) field[T] {
	return func(d *dest) *T { return via(d.archiver, f) }
}

func inNotifier[T any](f func(*Notifier) *T) field[T] {
	return func(d *dest) *T { return via(d.notifier, f) }
}

func inConsole[T any](f func(*Console) *T) field[T] {
	return func(d *dest) *T { return via(d.console, f) }
}

func inDevKafka[T any](f func(*DevKafka) *T) field[T] {
	return func(d *dest) *T { return via(d.devKafka, f) }
}

// either binds a row read by several processes to each one's own field.
func either[T any](fields ...field[T]) field[T] {
	return func(d *dest) *T {
		for _, f := range fields {
			if p := f(d); p != nil {
				return p
			}
		}
		return nil
	}
}

func via[C, T any](c *C, f func(*C) *T) *T {
	if c == nil {
		return nil
	}
	return f(c)
}

// bind makes a row's loader: parse the value (or the default) and store it
// in the field.
func bind[T any](to field[T], parse func(string) (T, error)) func(*env, *Var, *dest) {
	return func(e *env, v *Var, d *dest) {
		p := to(d)
		if p == nil {
			panic(fmt.Sprintf("config: the %s reads %s, which binds no field of its configuration", e.process, v.Name))
		}
		raw, name := e.value(v)
		x, err := parse(raw)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s: %w", name, err))
		}
		*p = x
	}
}

// env reads one process's rows through getenv (and its flags) and collects
// one error per bad value, so a misconfigured process reports every problem
// at once.
type env struct {
	process Process
	getenv  func(string) string
	flags   map[string]string // variable name -> the value of its flag, when given
	names   map[string]string // variable name -> the name its errors give
	errs    []error
}

func newEnv(p Process, getenv func(string) string) *env {
	return &env{process: p, getenv: getenv, flags: map[string]string{}, names: map[string]string{}}
}

// load fills d from every row the process reads.
func (e *env) load(d *dest) {
	for i := range table {
		if v := &table[i]; v.ReadBy(e.process) && v.load != nil {
			v.load(e, v, d)
		}
	}
}

// value returns v's value, from its flag, else the environment, else its
// default, and the name an error about it gives: the flag when it was
// given, else the variable.
func (e *env) value(v *Var) (raw, name string) {
	name = v.Name
	raw, given := e.flags[v.Name]
	if given {
		name = "-" + v.Flag
	} else {
		raw = e.getenv(v.Name)
	}
	e.names[v.Name] = name
	if raw = strings.TrimSpace(raw); raw != "" {
		return raw, name
	}
	if v.Default == "" && v.defaultFunc != nil {
		return v.defaultFunc(e.process), name
	}
	return v.Default, name
}

// name is what errors call the variable: its flag when the flag was given.
func (e *env) name(variable string) string {
	if n, ok := e.names[variable]; ok {
		return n
	}
	return variable
}

func (e *env) fail(name, expected, got string) {
	e.errs = append(e.errs, fmt.Errorf("%s: expected %s, got %q", name, expected, got))
}

func (e *env) err() error { return errors.Join(e.errs...) }
