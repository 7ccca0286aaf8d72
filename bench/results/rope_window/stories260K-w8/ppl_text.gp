set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/rope_window/stories260K-w8/ppl_text.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (text)'
set title 'stories260K'
plot 4.0076044694179735 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
20 8.891043422518452
40 32.64158994437257
e
