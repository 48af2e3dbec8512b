package bufpool

import (
	"runtime"
	"testing"
)

func TestGetHoldsWhatIsAsked(t *testing.T) {
	var p Pool
	for _, size := range []int{0, 1, MinSize - 1, MinSize, MinSize + 1, 1000, 64 << 10, 64<<10 + 1, MaxSize, MaxSize + 1} {
		b := p.Get(size)
		if len(*b) != 0 || cap(*b) < size {
			t.Errorf("Get(%d): len %d cap %d; want len 0, cap at least %d", size, len(*b), cap(*b), size)
		}
		*b = append(*b, make([]byte, size)...)
		p.Put(b)
		again := p.Get(size)
		if len(*again) != 0 || cap(*again) < size {
			t.Errorf("Get(%d) after a Put: len %d cap %d", size, len(*again), cap(*again))
		}
	}
}

func TestPutOfAGrownBufferKeepsItsClassHonest(t *testing.T) {
	var p Pool
	b := p.Get(300) // class 512
	*b = append(*b, make([]byte, 3000)...)
	p.Put(b) // cap ≥ 3000: filed where it holds what that class promises
	for _, size := range []int{512, 1024, 2048} {
		if got := p.Get(size); cap(*got) < size {
			t.Errorf("Get(%d) = cap %d", size, cap(*got))
		}
	}
}

func TestClass(t *testing.T) {
	for size, want := range map[int]int{0: 0, 256: 0, 257: 1, 320: 1, 321: 2, 512: 4, 513: 5, 640: 5, 1<<20 + 3: 1 + 12*4, MaxSize: classes - 1, MaxSize + 1: -1} {
		if got := class(size); got != want {
			t.Errorf("class(%d) = %d, want %d", size, got, want)
		}
	}
}

// TestClassSizes checks every class against its neighbours: each holds
// what it promises, the next is at most a quarter bigger, and a buffer
// of a class's capacity is filed back in that class.
func TestClassSizes(t *testing.T) {
	if classSize(classes-1) != MaxSize {
		t.Fatalf("the last class holds %d, want MaxSize %d", classSize(classes-1), MaxSize)
	}
	for c := range classes {
		n := classSize(c)
		if class(n) != c || fills(n) != c {
			t.Errorf("class %d holds %d: class(%d) = %d, fills(%d) = %d", c, n, n, class(n), n, fills(n))
		}
		if c > 0 {
			prev := classSize(c - 1)
			if n <= prev || n > prev+prev/4+1 {
				t.Errorf("class %d holds %d after %d: not a step of at most a quarter", c, n, prev)
			}
			if class(prev+1) != c || fills(n-1) != c-1 {
				t.Errorf("class %d: class(%d) = %d, fills(%d) = %d", c, prev+1, class(prev+1), n-1, fills(n-1))
			}
		}
	}
}

// TestLargeBuffersOutliveCollections checks that a large buffer given
// back is handed out again after garbage collections (which empty
// sync.Pool), and that what is kept stays within KeptBytes.
func TestLargeBuffersOutliveCollections(t *testing.T) {
	var p Pool
	b := p.Get(1 << 20)
	p.Put(b)
	runtime.GC()
	runtime.GC()
	if again := p.Get(1 << 20); again != b {
		t.Errorf("Get(1 MiB) after two collections returned a new buffer, want the one given back")
	}

	var held []*[]byte
	for range 3 * KeptBytes / (1 << 20) {
		held = append(held, p.Get(1<<20))
	}
	for _, b := range held {
		p.Put(b)
	}
	if p.keptBytes > KeptBytes {
		t.Errorf("kept %d bytes, want at most KeptBytes (%d)", p.keptBytes, KeptBytes)
	}
	if p.keptBytes < KeptBytes-MaxSize {
		t.Errorf("kept %d bytes of %d buffers given back, want close to KeptBytes (%d)", p.keptBytes, len(held), KeptBytes)
	}

	small := p.Get(LargeSize / 2)
	p.Put(small)
	for _, kept := range p.kept {
		for _, k := range kept {
			if k == small {
				t.Errorf("a buffer below LargeSize was kept outside sync.Pool")
			}
		}
	}
}

func TestPutAllGivesBackEachBuffer(t *testing.T) {
	var p Pool
	a, b := p.Get(LargeSize), p.Get(LargeSize)
	p.PutAll([]*[]byte{a, b})
	got := map[*[]byte]bool{p.Get(LargeSize): true, p.Get(LargeSize): true}
	if !got[a] || !got[b] { // large buffers are kept outside sync.Pool: Get finds them again
		t.Fatalf("after PutAll, Get returned %v; want both buffers given back (%p, %p)", got, a, b)
	}
}
