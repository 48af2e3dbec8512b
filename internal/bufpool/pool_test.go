package bufpool

import "testing"

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
	for size, want := range map[int]int{0: 0, 256: 0, 257: 1, 512: 1, 513: 2, MaxSize: maxShift - minShift, MaxSize + 1: -1} {
		if got := class(size); got != want {
			t.Errorf("class(%d) = %d, want %d", size, got, want)
		}
	}
}
