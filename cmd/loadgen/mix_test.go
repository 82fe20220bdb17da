package main

import (
	"strings"
	"testing"
)

func TestParseMix(t *testing.T) {
	tests := []struct {
		in      string
		want    Mix
		wantErr string // substring of the error; empty: no error
	}{
		{in: "normal=90,bursty=8,scanner=2,bruteforce=0", want: Mix{90, 8, 2, 0}},
		{in: "normal=100", want: Mix{100, 0, 0, 0}},
		{in: " scanner = 3 , normal=1 ", want: Mix{1, 0, 3, 0}},
		{in: "bruteforce=1", want: Mix{0, 0, 0, 1}},
		{in: "", wantErr: "empty"},
		{in: "normal", wantErr: `"normal": want profile=weight`},
		{in: "normal=90,", wantErr: `"": want profile=weight`},
		{in: "nromal=90", wantErr: `unknown profile "nromal" (profiles: normal, bursty, scanner, bruteforce)`},
		{in: "normal=-1", wantErr: `normal: weight "-1" is not an integer`},
		{in: "normal=1.5", wantErr: `normal: weight "1.5" is not an integer`},
		{in: "normal=x", wantErr: `weight "x"`},
		{in: "normal=2000000", wantErr: "between 0 and 1000000"},
		{in: "normal=1,normal=2", wantErr: `profile "normal" given twice`},
		{in: "normal=0,scanner=0", wantErr: "every weight is zero"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMix(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseMix(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseMix(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if again, err := ParseMix(got.String()); err != nil || again != got {
				t.Fatalf("String() %q does not parse back: %v, %v", got.String(), again, err)
			}
		})
	}
}

func TestPickerFollowsWeights(t *testing.T) {
	tests := []struct {
		name string
		mix  Mix
	}{
		{"all four", Mix{90, 8, 2, 1}},
		{"gaps", Mix{0, 5, 0, 5}},
		{"one", Mix{0, 0, 7, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pk := newPicker(tt.mix)
			var got Mix
			for r := range pk.total {
				got[pk.pick(r)]++
			}
			if got != tt.mix {
				t.Fatalf("draws over [0, %d) per profile = %v, want the weights %v", pk.total, got, tt.mix)
			}
			if active := tt.mix.String(); pk.one != !strings.Contains(active, ",") {
				t.Fatalf("one = %v for %s", pk.one, active)
			}
		})
	}
}
