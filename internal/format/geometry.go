package format

// Element and line rule
//
// Elements never straddle lines. A line of L bytes holds floor(L/E) elements
// of E bytes, packed from the start of the line; the remaining L mod E bytes
// are padding. E may be any size from 1 byte to the line size. For element
// sizes that divide the line size (every power of two up to L) there is no
// padding and element i sits at byte i*E of the object, exactly as in a flat
// array. Element i is in line i / perLine at byte (i % perLine) * E.
//
// Lines of an object map to namespaces by its Layout:
//
//	Striped:    line j is on namespace j mod N, at line (j / N) of that
//	            namespace's extent.
//	Replicated: line j is on every namespace, at line j of each extent.

// ElemsPerLine is the number of elements of elemSize bytes in a line of
// lineSize bytes. It is 0 when elemSize is 0 or larger than the line.
func ElemsPerLine(lineSize, elemSize uint64) uint64 {
	if elemSize == 0 || elemSize > lineSize {
		return 0
	}
	return lineSize / elemSize
}

// ObjectLines is the number of lines that length elements occupy.
func ObjectLines(length, lineSize, elemSize uint64) uint64 {
	per := ElemsPerLine(lineSize, elemSize)
	if per == 0 {
		return 0
	}
	return length/per + boolToU64(length%per != 0)
}

// ExtentLines is the number of lines namespace k of n holds for an object of
// lines lines in the given layout.
func ExtentLines(layout Layout, lines uint64, k, n uint32) uint64 {
	switch layout {
	case LayoutReplicated:
		return lines
	case LayoutStriped:
		if n == 0 || k >= n {
			return 0
		}
		return lines/uint64(n) + boolToU64(uint64(k) < lines%uint64(n))
	}
	return 0
}

func boolToU64(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
