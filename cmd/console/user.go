package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ratewarden/ratewarden/internal/console"
)

// userUsage says how to make a line of the users file.
const userUsage = "usage: console user NAME viewer|operator < password-file"

// userLine writes the users file's line of the user args name, its
// password the first line of stdin.
func userLine(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 2 {
		return errors.New(userUsage)
	}
	password, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the password: %w", err)
	}
	line, err := console.UserLine(args[0], console.Role(args[1]), strings.TrimRight(password, "\r\n"))
	if err != nil {
		return fmt.Errorf("%w (%s)", err, userUsage)
	}
	_, err = fmt.Fprintln(stdout, line)
	return err
}
