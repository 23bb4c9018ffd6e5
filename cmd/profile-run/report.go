package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/trainscope/trainscope/exporters/htmlreport"
	"github.com/trainscope/trainscope/internal/importer"
	"github.com/trainscope/trainscope/profiler"
)

// reportOptions are profile-run report's command line.
type reportOptions struct {
	runDir string
	html   bool
	out    string // the page; default <run dir>/report.html
}

const reportUsage = `Usage: profile-run report [flags] RUN_DIR [--html]

Without flags, prints the run's text report (RUN_DIR/report.txt: the
tables and analysis the run printed at its end, without its closing lines
on records, device timing and outputs).

With --html, reads the trace a run wrote (RUN_DIR/trace.json: the steps
-trace-steps kept) back into records, analyses the pipeline again and
writes one self-contained HTML page: a Gantt chart per step (forward and
backward blocks per chunk coloured by microbatch, transfers, bubbles
shaded), the bubble and straggler summary, and the top ranges. See
docs/report-html.md.

Flags:
`

func parseReportFlags(args []string, stderr io.Writer) (*reportOptions, error) {
	o := &reportOptions{}
	fs := flag.NewFlagSet("profile-run report", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&o.html, "html", false, "write the HTML page (without it, the text report is printed)")
	fs.StringVar(&o.out, "o", "", "the page's path (default <RUN_DIR>/report.html)")
	fs.Usage = func() {}
	// Flags may come before or after RUN_DIR (report RUN_DIR --html).
	dirs, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, reportUsage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return nil, errHelp
		}
		return nil, flagError("report: ", fs, err, nil)
	}
	switch {
	case len(dirs) == 0:
		return nil, usagef("report: no run directory (profile-run report RUN_DIR [--html])")
	case len(dirs) > 1:
		// Several hosts' runs of one job: import puts them on one clock.
		traces := make([]string, len(dirs))
		for i, d := range dirs {
			traces[i] = filepath.Join(d, "trace.json")
		}
		return nil, usagef("report: one run directory at a time, not %d (%s); for one job's runs on several hosts, import their traces together first (profile-run import %s; run each host with -trace-steps all for every step), which aligns their clocks, then report on the import's run directory",
			len(dirs), strings.Join(dirs, ", "), strings.Join(traces, " "))
	case !o.html && o.out != "":
		return nil, usagef("report: -o names the HTML page: add --html")
	}
	o.runDir = dirs[0]
	if o.html && o.out == "" {
		o.out = filepath.Join(o.runDir, "report.html")
	}
	return o, nil
}

// runReport is `profile-run report`: exit 2 for a usage mistake, 1 for a
// run directory or trace that cannot be read (named, with the byte where
// it went wrong), 0 when the page is written.
func runReport(in *interrupt, args []string, stdout, stderr io.Writer) int {
	// A page half made is worth nothing: the first signal ends it.
	in.nothingToStop()
	o, err := parseReportFlags(args, stderr)
	if code, failed := setupFailed(err, stderr, "profile-run report"); failed {
		return code
	}
	write := writeHTMLReport
	if !o.html {
		write = printTextReport
	}
	if err := write(in.abort, o, stdout, stderr); err != nil {
		if in.signal() != nil {
			fmt.Fprintf(stderr, "profile-run: report: %v: nothing written\n", context.Cause(in.abort))
			return in.exitCode()
		}
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "profile-run: %s (see profile-run report -h)\n", ue.msg)
			return exitUsage
		}
		fmt.Fprintf(stderr, "profile-run: report: %v\n", err)
		return exitFail
	}
	return exitOK
}

// checkRunDir says what is wrong with dir as a run directory, if
// anything it can see without reading the run's files.
func checkRunDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: no such run directory", dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s: not a run directory (profile-run writes one per run under -out)", dir)
	}
	return nil
}

// openRunFile opens the file name of the run directory dir and returns it
// with its path. Where dir is no run directory, or the file is missing, the
// error says so: for an -out directory holding runs, which (suggesting
// `profile-run report RUN flags`), else that the file is missing and why
// that may be.
func openRunFile(dir, name, flags, why string) (*os.File, string, error) {
	if err := checkRunDir(dir); err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, name)
	f, err := openRegular(path)
	if errors.Is(err, os.ErrNotExist) {
		if runs := runsUnder(dir, name, "trace.json"); len(runs) > 0 {
			return nil, path, outDirError(dir, runs, flags)
		}
		return nil, path, fmt.Errorf("%s: no such file: %s", path, why)
	}
	return f, path, err
}

// openRegular opens the file at path for reading where it is a regular
// file (or a link to one). A run's outputs are; a named pipe or a device
// in their place would leave the open, or the read, waiting for a writer
// that never comes.
func openRegular(path string) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s): profile-run writes its outputs as files", path, fileKind(fi.Mode()))
	}
	return os.Open(path)
}

// fileKind names the type of a file that is not a regular one.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// printTextReport copies the run's report.txt to stdout.
func printTextReport(ctx context.Context, o *reportOptions, stdout, _ io.Writer) error {
	why := "the run wrote no text report (was it made with -report off, or -report PATH?); profile-run report " + o.runDir + " --html draws its trace"
	if !fileExists(filepath.Join(o.runDir, "trace.json")) {
		why = "the directory holds neither report.txt nor trace.json, so it is no run directory profile-run wrote (or its run wrote neither: -report and -trace off or elsewhere)"
	}
	f, path, err := openRunFile(o.runDir, "report.txt", "", why)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
		// Made when the run began, written at its end.
		return fmt.Errorf("%s: empty file: the run wrote no report (it was killed, or is still running)", path)
	}
	_, err = io.Copy(stdout, ctxReader{ctx, f})
	return err
}

// writeHTMLReport writes the page; it stops, writing nothing, when ctx
// ends.
func writeHTMLReport(ctx context.Context, o *reportOptions, stdout, stderr io.Writer) error {
	if err := checkRunDir(o.runDir); err != nil {
		return err
	}
	if err := checkReportTarget(o.out); err != nil {
		return err
	}
	f, path, err := openRunFile(o.runDir, "trace.json", " --html",
		"the report reads the run's trace (was the run made with -trace off, or elsewhere with -trace PATH, or did it stop before its -trace-steps? its report.txt says)")
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err == nil && fi.Size() == 0 {
		f.Close()
		return fmt.Errorf("%s: empty file: the run wrote no trace (its -trace-steps kept no step it recorded, or it stopped before writing one): there is nothing to draw", path)
	}
	p, err := importer.Load(path, ctxReader{ctx, f})
	f.Close()
	if err != nil {
		return err
	}
	if p.Format != importer.FormatTrainscope {
		return fmt.Errorf("%s: a %s, not a trace trainscope wrote (profile-run import reads it into a run directory of its own)", path, p.Format)
	}
	in := htmlreport.Input{Title: filepath.Base(filepath.Clean(o.runDir)), Covers: p.OtherData["steps"], Records: p.Records,
		SharedDevices: p.OtherData["shared"]}
	if clocks := p.OtherData["clocks"]; clocks != "" {
		in.SeveralClocks = true
		in.Notes = append(in.Notes, "clocks "+clocks)
	}
	if in.Covers == "" {
		in.Covers = stepsText(p.Records)
	}
	if partial := p.OtherData["partial"]; partial != "" {
		in.Notes = append(in.Notes, "the run did not finish: "+partial)
	}
	// What the run ran on, from its summary.json where it wrote one; a
	// page is drawn without it (a run of -report off, or older).
	if sj := filepath.Join(filepath.Dir(path), "summary.json"); fileExists(sj) {
		switch doc, err := readSummary(sj); {
		case err != nil:
			fmt.Fprintf(stderr, "profile-run: report: warning: %v: the page does not say what the run ran on\n", err)
		case doc.Environment != nil:
			in.Environment = doc.Environment.Text()
		}
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(stderr, "profile-run: report: warning: %s\n", w)
		in.Notes = append(in.Notes, w)
	}
	// Written beside its final name and moved there (placeReport), so a
	// failure leaves no half page.
	tmp, err := os.CreateTemp(filepath.Dir(o.out), ".report-*.html")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the temporary file's name is not the user's
		}
		return fmt.Errorf("%s: cannot write the page in %s: %w", o.out, filepath.Dir(o.out), err)
	}
	defer os.Remove(tmp.Name())
	st, err := htmlreport.Write(tmp, in)
	if err != nil {
		tmp.Close()
		if errors.Is(err, htmlreport.ErrNoSteps) {
			return fmt.Errorf("%s: no records with a step label and no collective or point-to-point operation: nothing to draw", path)
		}
		return err
	}
	size, _ := tmp.Seek(0, io.SeekCurrent)
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := placeReport(tmp.Name(), o.out); err != nil {
		return err
	}
	if st.Steps == 0 {
		fmt.Fprintf(stdout, "profile-run: report: %s, operations without steps to account, %s of operations drawn, %s, %d KiB → %s\n",
			path, count(st.Windows, "window", "windows"), count(st.Transfers, "transfer", "transfers"), (size+1023)/1024, o.out)
		return nil
	}
	blocks := fmt.Sprintf("%d forward and %d backward blocks", st.Forward, st.Backward)
	if st.Kernels > 0 {
		// A wrapped run's traced kernels: no forward or backward to tell.
		kernels := fmt.Sprintf("%s drawn as %s", count(st.Kernels, "traced kernel", "traced kernels"), count(st.KernelBoxes, "box", "boxes"))
		blocks = kernels
		if st.Forward+st.Backward > 0 {
			blocks = fmt.Sprintf("%d forward and %d backward blocks, %s", st.Forward, st.Backward, kernels)
		}
	}
	fmt.Fprintf(stdout, "profile-run: report: %s, %s (%s), %s, %s, %d KiB → %s\n",
		path, count(st.Steps, "step", "steps"), in.Covers, blocks, count(st.Transfers, "transfer", "transfers"), (size+1023)/1024, o.out)
	return nil
}

// A page profile-run report wrote begins with this, and names trainscope in
// its title before its first kilobyte ends.
const (
	htmlReportStart = "<!DOCTYPE html>\n<html"
	htmlReportTitle = "<title>trainscope · "
)

// checkReportTarget refuses a page path that holds anything but a page
// this command wrote (the run's trace, its report.txt, the user's file):
// refreshing RUN_DIR/report.html replaces it; nothing else is replaced.
func checkReportTarget(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil // none there, or writing the page says what is wrong
	case !fi.Mode().IsRegular():
		return usagef("-o %s: exists and is not a file", path)
	case !isHTMLReport(path):
		return usagef("-o %s: exists and is not an HTML report profile-run report wrote: not replaced (name another path, or remove it)", path)
	}
	return nil
}

// isHTMLReport reports whether path holds a page profile-run report wrote.
func isHTMLReport(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 1024)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	return bytes.HasPrefix(head, []byte(htmlReportStart)) && bytes.Contains(head, []byte(htmlReportTitle))
}

// placeReport moves the finished page at tmp to path: by a link where
// path does not exist, so that a file made there meanwhile is not
// replaced; by a rename over a page this command wrote.
func placeReport(tmp, path string) error {
	if err := os.Link(tmp, path); err == nil {
		return nil
	}
	// path exists (checked again: it may have appeared meanwhile), or
	// the file system has no hard links.
	if err := checkReportTarget(path); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// runsUnder lists the subdirectories of dir that hold one of the files
// names (report.txt, trace.json), not empty, oldest first (by when the
// first of them found was written, then by name: run IDs begin with the
// second the run began). dir is then an -out directory, not a run
// directory. A run whose files are still empty (one being made, or
// killed) has nothing to read yet.
func runsUnder(dir string, names ...string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type run struct {
		name    string
		written time.Time
	}
	var runs []run
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		for _, name := range names {
			if fi, err := os.Stat(filepath.Join(dir, e.Name(), name)); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
				runs = append(runs, run{e.Name(), fi.ModTime()})
				break
			}
		}
	}
	slices.SortFunc(runs, func(a, b run) int {
		if c := a.written.Compare(b.written); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	list := make([]string, len(runs))
	for i, r := range runs {
		list[i] = r.name
	}
	return list
}

// outDirError says that dir holds runs, and which, so the user picks one;
// flags end the command it suggests.
func outDirError(dir string, runs []string, flags string) error {
	latest := filepath.Join(dir, runs[len(runs)-1])
	if len(runs) == 1 {
		return fmt.Errorf("%s is an output directory holding one run directory, not a run directory: profile-run report %s%s", dir, latest, flags)
	}
	const listed = 5
	names := slices.Clone(runs)
	slices.Reverse(names)
	more := ""
	if len(names) > listed {
		more = fmt.Sprintf(", and %d older", len(names)-listed)
		names = names[:listed]
	}
	return fmt.Errorf("%s is an output directory holding %d run directories (latest first: %s%s), not a run directory: name one, e.g. the latest: profile-run report %s%s",
		dir, len(runs), strings.Join(names, ", "), more, latest, flags)
}

// stepsText lists the step labels of records, for a trace that does not
// say which steps it covers.
func stepsText(recs []profiler.Record) string {
	var steps []int
	for i := range recs {
		if s := int(recs[i].Step); s != profiler.None && !slices.Contains(steps, s) {
			steps = append(steps, s)
		}
	}
	if len(steps) == 0 {
		return "" // the page says what the records are
	}
	slices.Sort(steps)
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = fmt.Sprint(s)
	}
	return "steps " + strings.Join(parts, ", ")
}

// parseInterleaved parses fs's flags wherever they stand among the
// arguments (import a.json b.json -quiet, report RUN_DIR --html) and
// returns the other arguments in order; after "--" every argument is one
// of those, so a file named like a flag can still be given.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" {
			return append(rest, left...), nil
		}
		if len(left) == 0 {
			return rest, nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}
