package npy

import (
	"fmt"
	"strconv"
)

// parseDict parses the header dictionary, a Python literal such as
//
//	{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
//
// Keys may come in any order; all three must be present, no others.
func parseDict(s string, h *Header) error {
	p := &parser{s: s}
	p.ws()
	if !p.eat('{') {
		return p.errorf("want '{'")
	}
	var haveDescr, haveOrder, haveShape bool
	for {
		p.ws()
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		p.ws()
		if !p.eat(':') {
			return p.errorf("want ':' after key %q", key)
		}
		p.ws()
		switch key {
		case "descr":
			if haveDescr {
				return p.errorf("duplicate key 'descr'")
			}
			haveDescr = true
			if p.peek() != '\'' && p.peek() != '"' {
				return fmt.Errorf("%w: structured or non-scalar dtype in header (only simple dtypes such as '<f4')", ErrUnsupported)
			}
			d, err := p.str()
			if err != nil {
				return err
			}
			if h.Dtype, err = ParseDescr(d); err != nil {
				return err
			}
		case "fortran_order":
			if haveOrder {
				return p.errorf("duplicate key 'fortran_order'")
			}
			haveOrder = true
			switch {
			case p.word("False"):
			case p.word("True"):
				return fmt.Errorf("%w: fortran_order is True (save with np.ascontiguousarray)", ErrUnsupported)
			default:
				return p.errorf("want True or False for 'fortran_order'")
			}
		case "shape":
			if haveShape {
				return p.errorf("duplicate key 'shape'")
			}
			haveShape = true
			if h.Shape, err = p.tuple(); err != nil {
				return err
			}
		default:
			return p.errorf("unknown key %q", key)
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		p.ws()
		if p.eat('}') {
			break
		}
		return p.errorf("want ',' or '}'")
	}
	p.ws()
	if p.i != len(p.s) {
		return p.errorf("trailing bytes after the dictionary")
	}
	switch {
	case !haveDescr:
		return fmt.Errorf("%w: header has no 'descr'", ErrFormat)
	case !haveOrder:
		return fmt.Errorf("%w: header has no 'fortran_order'", ErrFormat)
	case !haveShape:
		return fmt.Errorf("%w: header has no 'shape'", ErrFormat)
	}
	return nil
}

type parser struct {
	s string
	i int
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: header dictionary at byte %d: %s", ErrFormat, p.i, fmt.Sprintf(format, args...))
}

func (p *parser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *parser) ws() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n' || p.s[p.i] == '\t' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *parser) eat(c byte) bool {
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

func (p *parser) word(w string) bool {
	if len(p.s)-p.i >= len(w) && p.s[p.i:p.i+len(w)] == w {
		p.i += len(w)
		return true
	}
	return false
}

// str parses a quoted string without escapes (NumPy never writes any in the
// keys and descr it understands).
func (p *parser) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", p.errorf("want a quoted string")
	}
	p.i++
	start := p.i
	for p.i < len(p.s) && p.s[p.i] != q {
		if p.s[p.i] == '\\' {
			return "", p.errorf("escape sequences are not supported")
		}
		p.i++
	}
	if p.i >= len(p.s) {
		return "", p.errorf("unterminated string")
	}
	v := p.s[start:p.i]
	p.i++
	return v, nil
}

// tuple parses "()", "(5,)", "(3, 4)" or "(3, 4,)".
func (p *parser) tuple() ([]int64, error) {
	if !p.eat('(') {
		return nil, p.errorf("want '(' for 'shape'")
	}
	shape := []int64{}
	for {
		p.ws()
		if p.eat(')') {
			return shape, nil
		}
		start := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if start == p.i {
			return nil, p.errorf("want a dimension in 'shape'")
		}
		d, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
		if err != nil {
			return nil, p.errorf("dimension %q out of range", p.s[start:p.i])
		}
		if len(shape) >= 64 {
			return nil, p.errorf("more than 64 dimensions")
		}
		shape = append(shape, d)
		p.ws()
		if p.eat(',') {
			continue
		}
		p.ws()
		if p.eat(')') {
			if len(shape) == 1 {
				return nil, p.errorf("a 1-tuple needs a trailing comma")
			}
			return shape, nil
		}
		return nil, p.errorf("want ',' or ')' in 'shape'")
	}
}
