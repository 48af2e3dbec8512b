package main

// One rule for the exit status of every command, applied to the whole
// command tree at once so that a new command cannot escape it: a command
// line rpr cannot make sense of (an unknown command, help topic or flag,
// a wrong number of arguments) is exit status 2, like a Redis rpr cannot
// reach.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// strictUsage makes every usage error under root exit status 2: unknown
// commands and help topics, flags that do not parse and argument counts
// the command refuses. Commands that check their arguments with Args keep
// their own message; cobra's are given the command's --help to read.
func strictUsage(root *cobra.Command) {
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return badInput(fmt.Errorf("%w (see %s --help)", err, c.CommandPath()))
	})
	root.SetHelpCommand(newHelpCommand(root))
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.Runnable() && c.HasSubCommands() {
			strictGroup(c)
		} else {
			strictArgs(c)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// strictArgs makes the argument check of c exit status 2. A runnable
// command without subcommands and without a check of its own takes no
// arguments: cobra would otherwise pass stray words silently.
func strictArgs(c *cobra.Command) {
	check := c.Args
	if check == nil {
		if !c.Runnable() || c.HasSubCommands() {
			return
		}
		check = cobra.NoArgs
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		err := check(cmd, args)
		var exit exitError
		if err == nil || errors.As(err, &exit) {
			return err
		}
		return badInput(fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath()))
	}
}

// strictGroup makes c, a command that only groups subcommands (rpr
// itself, rpr completion), print its help when run bare and refuse a
// word that names none of them with exit status 2.
func strictGroup(c *cobra.Command) {
	c.Args = cobra.ArbitraryArgs
	c.SuggestionsMinimumDistance = 2
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownCommand(cmd, args[0])
	}
}

// unknownCommand is the error for a word that names no subcommand of
// cmd: exit status 2, with the nearest names when there are any.
func unknownCommand(cmd *cobra.Command, word string) error {
	hint := cmd.CommandPath() + " --help lists the commands"
	if s := cmd.SuggestionsFor(word); len(s) > 0 {
		hint = "did you mean " + strings.Join(s, " or ") + "? (" + hint + ")"
	}
	return badInput(fmt.Errorf("unknown command %q for %q: %s", word, cmd.CommandPath(), hint))
}

// newHelpCommand is "rpr help [command]": cobra's, except that a topic
// that names no command is exit status 2 instead of a note and status 0.
func newHelpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  `help prints the help of any command: rpr help dlq replay.`,
		Args:  cobra.ArbitraryArgs,
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target := root
			for _, word := range args {
				if target = subcommand(target, word); target == nil {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
			}
			var out []cobra.Completion
			for _, c := range target.Commands() {
				if c.IsAvailableCommand() {
					out = append(out, c.Name())
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target := root
			for i, word := range args {
				next := subcommand(target, word)
				if next == nil {
					return badInput(fmt.Errorf("unknown help topic %q: no command %q (rpr help lists the commands)", strings.Join(args, " "), "rpr "+strings.Join(args[:i+1], " ")))
				}
				target = next
			}
			target.InitDefaultHelpFlag()
			return target.Help()
		},
	}
}

// subcommand is the subcommand of c named (or aliased) word; nil when
// there is none.
func subcommand(c *cobra.Command, word string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == word || sub.HasAlias(word) {
			return sub
		}
	}
	return nil
}
